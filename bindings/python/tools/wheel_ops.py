"""Every op forward and backward from an installed dlfuse, checked against float64.

    python wheel_ops.py cpu [--torch] [--cpp-ops] [--jax]
    python wheel_ops.py cuda [--cpp-ops] [--jax]

The package calls (dlfuse.*) on NumPy arrays (cpu) or torch CUDA tensors (cuda), then with
torch (always on cuda) dlfuse.torch's autograd ops on that device; --cpp-ops requires
dlfuse.torch to use the wheel's C++ operators. --jax: dlfuse.jax's functions under jit and
grad on JAX's default device, against float64 NumPy.

Run from outside the source tree with no DLFUSE_* variable set: the package must find its
own libdlfuse and plugins. Fresh random inputs each run (seed printed); outputs poisoned
first. float32 tolerances: rtol 1e-4, atol 1e-4 (K <= 64 here; TF32 is off).
"""
import os
import sys

import numpy as np

import dlfuse

RTOL = ATOL = 1e-4
ACTS = ["identity", "relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu"]
OUT_FORM = {"identity", "relu", "sigmoid", "tanh"}  # backward from `out`


def _erf(z):
    from math import erf  # float64, elementwise (no SciPy needed)
    return np.vectorize(erf)(z)


def act_and_grad(name, z):
    """act(z) and act'(z) in float64."""
    if name == "identity":
        return z, np.ones_like(z)
    if name == "relu":
        return np.maximum(z, 0), (z > 0).astype(np.float64)
    if name == "sigmoid":
        s = 1 / (1 + np.exp(-z))
        return s, s * (1 - s)
    if name == "tanh":
        t = np.tanh(z)
        return t, 1 - t * t
    if name == "gelu":
        cdf = 0.5 * (1 + _erf(z / np.sqrt(2)))
        pdf = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
        return z * cdf, cdf + z * pdf
    if name == "gelu_tanh":
        c = np.sqrt(2 / np.pi)
        u = c * (z + 0.044715 * z ** 3)
        t = np.tanh(u)
        return 0.5 * z * (1 + t), 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)
    if name == "silu":
        s = 1 / (1 + np.exp(-z))
        return z * s, s * (1 + z * (1 - s))
    raise ValueError(name)


class Checker:
    def __init__(self, device):
        self.device, self.n = device, 0
        self.seed = int.from_bytes(os.urandom(4), "little")
        self.rng = np.random.default_rng(self.seed)
        print(f"device {device}, seed {self.seed}")
        self.torch = None
        if device == "cuda" or "--torch" in sys.argv:
            import torch
            self.torch = torch

    def rand(self, *shape):
        return self.rng.standard_normal(shape)

    def dev(self, a64):
        """float32 copy of a float64 array on the device, as the package receives it."""
        a = np.ascontiguousarray(a64, np.float32)
        return self.torch.from_numpy(a).cuda() if self.device == "cuda" else a

    def empty(self, shape):
        """a poisoned float32 output on the device."""
        if self.device == "cuda":
            return self.torch.full(shape, float("nan"), device="cuda")
        return np.full(shape, np.nan, np.float32)

    def host(self, t):
        """float64 host copy of an output: a torch tensor, or (cpu) any DLPack array."""
        if self.torch is not None and isinstance(t, self.torch.Tensor):
            if t.is_cuda:
                self.torch.cuda.synchronize()
            return t.detach().double().cpu().numpy()
        return np.from_dlpack(t).astype(np.float64)

    def close(self, what, got, ref):
        got = self.host(got)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=what)
        self.n += 1


def package_ops(c):
    """dlfuse.* on the device's arrays; outputs passed in poisoned."""
    M, K, N = 33, 48, 17
    a, b, bias, res = c.rand(M, K), c.rand(K, N), c.rand(N), c.rand(M, N)
    z = a @ b + bias
    A, B, BIAS = c.dev(a), c.dev(b), c.dev(bias)
    # matmul_add_relu
    out = c.empty((M, N))
    dlfuse.matmul_add_relu(A, B, BIAS, out=out)
    c.close("matmul_add_relu", out, np.maximum(z, 0))
    g = c.rand(M, N)
    dz = g * (z > 0)
    grads = [c.empty(s) for s in ((M, K), (K, N), (N,))]
    dlfuse.matmul_add_relu_backward(c.dev(g), A, B, out, grad_a=grads[0], grad_b=grads[1], grad_bias=grads[2])
    for name, gr, ref in zip(("grad_a", "grad_b", "grad_bias"), grads, (dz @ b.T, a.T @ dz, dz.sum(0))):
        c.close("matmul_add_relu_backward " + name, gr, ref)
    # matmul_add_activation, backward from out (identity, relu, sigmoid, tanh) and from pre
    for act in ACTS:
        y, d = act_and_grad(act, z)
        out, pre = c.empty((M, N)), c.empty((M, N))
        dlfuse.matmul_add_activation(A, B, BIAS, act, out=out, pre=pre)
        c.close(f"matmul_add_activation {act} out", out, y)
        c.close(f"matmul_add_activation {act} pre", pre, z)
        dz = g * d
        for form in (["out", "pre"] if act in OUT_FORM else ["pre"]):
            grads = [c.empty(s) for s in ((M, K), (K, N), (N,))]
            dlfuse.matmul_add_activation_backward(c.dev(g), A, B, act, **{form: out if form == "out" else pre},
                                                  grad_a=grads[0], grad_b=grads[1], grad_bias=grads[2])
            for name, gr, ref in zip(("grad_a", "grad_b", "grad_bias"), grads, (dz @ b.T, a.T @ dz, dz.sum(0))):
                c.close(f"matmul_add_activation_backward {act} from {form} {name}", gr, ref)
    # matmul_add_residual
    out = c.empty((M, N))
    dlfuse.matmul_add_residual(A, B, BIAS, c.dev(res), out=out)
    c.close("matmul_add_residual", out, z + res)
    grads = [c.empty(s) for s in ((M, K), (K, N), (N,), (M, N))]
    dlfuse.matmul_add_residual_backward(c.dev(g), A, B, (N,), (M, N), grad_a=grads[0], grad_b=grads[1],
                                        grad_bias=grads[2], grad_residual=grads[3])
    for name, gr, ref in zip(("grad_a", "grad_b", "grad_bias", "grad_residual"), grads,
                             (g @ b.T, a.T @ g, g.sum(0), g)):
        c.close("matmul_add_residual_backward " + name, gr, ref)
    # add_mul_activation, backward from the inputs and (identity, relu, sigmoid, tanh) from out
    x, yy, m = c.rand(M, N), c.rand(M, N), 0.75
    X, Y = c.dev(x), c.dev(yy)
    pre = x + bias + m * yy
    for act in ACTS:
        y, d = act_and_grad(act, pre)
        out = c.empty((M, N))
        dlfuse.add_mul_activation(X, Y, BIAS, m, act, out=out)
        c.close(f"add_mul_activation {act}", out, y)
        dp = g * d
        refs = (dp, m * dp, dp.sum(0))
        grads = [c.empty(s) for s in ((M, N), (M, N), (N,))]
        dlfuse.add_mul_activation_backward(c.dev(g), X, Y, BIAS, m, act,
                                           grad_x=grads[0], grad_y=grads[1], grad_bias=grads[2])
        for name, gr, ref in zip(("grad_x", "grad_y", "grad_bias"), grads, refs):
            c.close(f"add_mul_activation_backward {act} {name}", gr, ref)
        if act in OUT_FORM:
            grads = [c.empty(s) for s in ((M, N), (M, N), (N,))]
            dlfuse.add_mul_activation_backward(c.dev(g), None, None, None, m, act, out=out, bias_shape=(N,),
                                               grad_x=grads[0], grad_y=grads[1], grad_bias=grads[2])
            for name, gr, ref in zip(("grad_x", "grad_y", "grad_bias"), grads, refs):
                c.close(f"add_mul_activation_backward from out {act} {name}", gr, ref)


def torch_ops(c, require_cpp):
    """dlfuse.torch's autograd ops on the device against float64 autograd of plain torch."""
    torch = c.torch
    import torch.nn.functional as F
    import dlfuse.torch as dft
    from dlfuse import _torch_cpp
    print("dlfuse.torch operators:", "C++" if dft.CPP_OPS else "Python (" + str(_torch_cpp.why_not) + ")")
    if require_cpp:
        assert dft.CPP_OPS, _torch_cpp.why_not
    ref_act = {"identity": lambda t: t, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
               "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}

    def run(name, fn, ref_fn, shapes):
        ins64 = [torch.from_numpy(c.rand(*s)).requires_grad_() for s in shapes]
        ins = [t.detach().float().to(c.device).requires_grad_() for t in ins64]
        out = fn(*ins)
        ref = ref_fn(*ins64)
        g = torch.from_numpy(c.rand(*ref.shape))
        out.backward(g.float().to(c.device))
        ref.backward(g)
        c.close(name + " forward", out.detach(), ref.detach().numpy())
        for i, (t, t64) in enumerate(zip(ins, ins64)):
            c.close(f"{name} grad {i}", t.grad, t64.grad.numpy())

    M, K, N = 64, 32, 48
    run("torch matmul_add_relu", dft.matmul_add_relu, lambda a, b, bias: torch.relu(a @ b + bias),
        [(M, K), (K, N), (N,)])
    run("torch matmul_add_residual", dft.matmul_add_residual, lambda a, b, bias, r: a @ b + bias + r,
        [(M, K), (K, N), (N,), (M, N)])
    for act in ACTS:
        run(f"torch matmul_add_activation {act}", lambda a, b, bias: dft.matmul_add_activation(a, b, bias, act),
            lambda a, b, bias: ref_act[act](a @ b + bias), [(2, M, K), (K, N), (N,)])
        run(f"torch add_mul_activation {act}", lambda x, y, bias: dft.add_mul_activation(x, y, bias, 0.5, act),
            lambda x, y, bias: ref_act[act](x + bias + 0.5 * y), [(M, N), (M, N), (N,)])


def jax_ops(c):
    """dlfuse.jax under jit, forward and grad against float64; needs the wheel's FFI handlers."""
    import jax
    import jax.numpy as jnp
    import dlfuse.jax as djx
    print("dlfuse.jax on", jax.devices()[0], "jax", jax.__version__)
    M, K, N = 40, 24, 20

    def run(name, fn, ref_and_grads, shapes):
        ins64 = [c.rand(*s) for s in shapes]
        g64 = c.rand(*ref_and_grads(*ins64, None)[0].shape)
        ins = [jnp.asarray(x, jnp.float32) for x in ins64]
        out = jax.jit(fn)(*ins)
        _, vjp = jax.vjp(jax.jit(fn), *ins)
        grads = vjp(jnp.asarray(g64, jnp.float32))
        ref, ref_grads = ref_and_grads(*ins64, g64)
        c.close(f"jax {name} forward", np.asarray(out), ref)
        for i, (gr, rg) in enumerate(zip(grads, ref_grads)):
            c.close(f"jax {name} grad {i}", np.asarray(gr), rg)

    for act in ACTS:
        def mm_ref(a, b, bias, g, act=act):
            z = a @ b + bias
            out, d = act_and_grad(act, z)
            if g is None:
                return out, None
            gz = g * d
            return out, (gz @ b.T, a.T @ gz, gz.sum(0))
        run(f"matmul_add_activation {act}", lambda a, b, bias, act=act: djx.matmul_add_activation(a, b, bias, act),
            mm_ref, [(M, K), (K, N), (N,)])

        def am_ref(x, y, bias, g, act=act):
            out, d = act_and_grad(act, x + bias + 0.5 * y)
            if g is None:
                return out, None
            gz = g * d
            return out, (gz, 0.5 * gz, gz.sum(0))
        run(f"add_mul_activation {act}", lambda x, y, bias, act=act: djx.add_mul_activation(x, y, bias, 0.5, act),
            am_ref, [(M, N), (M, N), (N,)])

    def res_ref(a, b, bias, r, g):
        out = a @ b + bias + r
        return out, None if g is None else (g @ b.T, a.T @ g, g.sum(0), g)
    run("matmul_add_residual", djx.matmul_add_residual, res_ref, [(M, K), (K, N), (N,), (M, N)])


def main():
    device = sys.argv[1]
    venv = os.path.realpath(sys.prefix)
    for path in (dlfuse.__file__, dlfuse.library_path()):
        assert os.path.realpath(path).startswith(venv), f"{path} is not from {venv}"
    leaked = sorted(k for k in os.environ if k.startswith("DLFUSE_"))
    assert not leaked, f"DLFUSE_* variables set: {leaked}"
    print("dlfuse", dlfuse.__version__, "from", os.path.dirname(dlfuse.__file__))
    print("plugins:", [(p.name, p.available, p.reason) for p in dlfuse.plugins()])
    c = Checker(device)
    if device == "cuda":
        served = dlfuse.registry().resolve("matmul_add_activation", "cuda", "float32")
        assert served == "cuda", served
    package_ops(c)
    if device == "cuda" or "--torch" in sys.argv:
        torch_ops(c, "--cpp-ops" in sys.argv)
    if "--jax" in sys.argv:
        jax_ops(c)
    print(f"wheel ops OK on {device}: {c.n} checks, every op forward and backward")


if __name__ == "__main__":
    main()
