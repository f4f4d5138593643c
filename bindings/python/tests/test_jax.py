"""dlfuse.jax: every op under jax.jit, jax.grad, jax.vmap and jit-of-grad, against float64
NumPy at docs/ops.md's tolerances, on CPU (the preferred CPU plugin; float64 by the test
plugin) and, where JAX and dlfuse both have CUDA, on CUDA. Errors: trace-time ones name the
argument; run-time refusals come back as JAX errors carrying dlfuse's message."""
import functools
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REQUIRE_CUDA, cuda_plugin_available

if "libasan" in os.environ.get("LD_PRELOAD", ""):
    pytest.skip("jaxlib does not start with the ASan runtime preloaded (its __cxa_throw "
                "interceptor fails); sanitized builds have no dlfuse.jax", allow_module_level=True)
jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import dlfuse  # noqa: E402

import dlfuse.jax as djx  # noqa: E402  (jax is here: the handlers must be too)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import jax_mlp  # noqa: E402

ACTS = ("identity", "relu", "sigmoid", "tanh", "gelu_erf", "gelu_tanh", "silu")
OUT_FORM = ("identity", "relu", "sigmoid", "tanh")
# (rtol, atol) of docs/ops.md
TOL = {"float64": (1e-12, 1e-300), "float32": (2e-5, 1e-6), "float16": (4e-3, 1e-3),
       "bfloat16": (1.6e-2, 1e-2)}


def _jax_cuda():
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def _device(name):
    if name == "cpu":
        return jax.devices("cpu")[0]
    if not (_jax_cuda() and cuda_plugin_available()):
        if REQUIRE_CUDA:
            pytest.fail("DLFUSE_REQUIRE_CUDA=1 but JAX or dlfuse has no CUDA device")
        pytest.skip("JAX with CUDA and dlfuse's CUDA plugin are both needed")
    return jax.devices("cuda")[0]


DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16", "float64")


@pytest.fixture(params=DEVICES)
def device(request):
    return _device(request.param)


@pytest.fixture(params=DTYPES)
def dtype(request, device):
    if request.param == "float64":
        if not _has_f64("cpu" if device.platform == "cpu" else "cuda"):
            pytest.skip("no plugin serves float64 on this device")
        with jax.enable_x64(True):
            yield request.param
    else:
        yield request.param


def _has_f64(platform):
    try:
        dlfuse.registry().resolve("matmul_add_relu", platform, "float64")
        return True
    except dlfuse.Error:
        return False


# ---- float64 references (docs/ops.md) ------------------------------------------------------

_erf = np.vectorize(math.erf)


def act_ref(name, p):
    if name == "identity":
        return p
    if name == "relu":
        return np.where(p > 0, p, 0.0)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-p))
    if name == "tanh":
        return np.tanh(p)
    if name == "gelu_erf":
        return 0.5 * p * (1 + _erf(p / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * p * (1 + np.tanh(math.sqrt(2 / math.pi) * (p + 0.044715 * p ** 3)))
    s = 1 / (1 + np.exp(-p))
    return p * s


def dact_ref(name, p, out):
    """(act'(p), A(p)): the derivative and the sum of its terms' magnitudes (docs/ops.md).
    Out-form activations read the kernel's `out`, as the backward kernel does."""
    if name == "identity":
        return np.ones_like(p), np.ones_like(p)
    if name == "relu":
        d = (out > 0).astype(np.float64)
        return d, d
    if name == "sigmoid":
        return out * (1 - out), np.abs(out) + out * out
    if name == "tanh":
        return 1 - out * out, 1 + out * out
    if name == "gelu_erf":
        cdf = 0.5 * (1 + _erf(p / math.sqrt(2)))
        pdf = np.exp(-p * p / 2) / math.sqrt(2 * math.pi)
        return cdf + p * pdf, cdf + np.abs(p) * pdf
    if name == "gelu_tanh":
        c = math.sqrt(2 / math.pi)
        t = np.tanh(c * (p + 0.044715 * p ** 3))
        du = c * (1 + 3 * 0.044715 * p * p)
        return 0.5 * (1 + t) + 0.5 * p * (1 - t * t) * du, 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(p) * (1 + t * t) * du
    s = 1 / (1 + np.exp(-p))
    return s * (1 + p * (1 - s)), s + np.abs(p) * (s + s * s)


def reduce_to(g, shape):
    while g.ndim > len(shape):
        g = g.sum(0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdims=True)
    return g


def f64(x):
    return np.asarray(jnp.asarray(x, jnp.float32) if x.dtype != jnp.float64 else x, np.float64)


def check(got, ref, scale, dtype, what):
    rtol, atol = TOL[dtype]
    got = f64(got)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    bad = np.abs(got - ref) > atol + rtol * np.maximum(scale, np.abs(ref))
    assert not bad.any(), (f"{what} ({dtype}): {bad.sum()} of {bad.size} off; first at "
                           f"{np.argwhere(bad)[0]}: got {got[bad][0]}, ref {ref[bad][0]}")


def rand(rng, shape, dtype, device):
    return jax.device_put(jnp.asarray(rng.standard_normal(shape), dtype), device)


# ---- the ops and their references -----------------------------------------------------------
#
# Each case: (name, function of the arrays, shapes, reference). The reference gives the float64
# forward, its scale, and a function from the cotangent to each input's (gradient, scale).

def mm_ref(act, a, b, bias, residual=None):
    pre = a @ b + bias + (0 if residual is None else residual)
    spre = np.abs(a) @ np.abs(b) + np.abs(bias) + (0 if residual is None else np.abs(residual))
    out = act_ref(act, pre)

    def grads(ct, out_k):
        d, amag = dact_ref(act, pre, out_k)
        dz, sdz = ct * d, np.abs(ct) * amag
        res = [(reduce_to(dz @ np.swapaxes(b, -1, -2), a.shape),
                reduce_to(sdz @ np.swapaxes(np.abs(b), -1, -2), a.shape)),
               (reduce_to(np.swapaxes(a, -1, -2) @ dz, b.shape),
                reduce_to(np.swapaxes(np.abs(a), -1, -2) @ sdz, b.shape)),
               (reduce_to(dz, bias.shape), reduce_to(sdz, bias.shape))]
        if residual is not None:
            res.append((reduce_to(dz, residual.shape), reduce_to(sdz, residual.shape)))
        return res
    _, amag = dact_ref(act, pre, out)
    return out, amag * spre + np.abs(out), grads


def ama_ref(act, multiplier, x, y, bias):
    pre = x + bias + multiplier * y
    out = act_ref(act, pre)
    spre = np.abs(x) + np.abs(bias) + abs(multiplier) * np.abs(y)

    def grads(ct, out_k):
        d, amag = dact_ref(act, pre, out_k)
        dz, sdz = ct * d, np.abs(ct) * amag
        return [(reduce_to(dz, x.shape), reduce_to(sdz, x.shape)),
                (reduce_to(multiplier * dz, y.shape), reduce_to(abs(multiplier) * sdz, y.shape)),
                (reduce_to(dz, bias.shape), reduce_to(sdz, bias.shape))]
    _, amag = dact_ref(act, pre, out)
    return out, np.maximum(amag, 1) * spre + np.abs(out), grads


def cases():
    mm = ((5, 8), (8, 6), (6,))
    for act in ACTS:
        yield f"matmul_add_activation-{act}", (lambda act: lambda a, b, c: djx.matmul_add_activation(a, b, c, act))(act), mm, (lambda act: lambda a, b, c: mm_ref(act, a, b, c))(act)
        yield f"add_mul_activation-{act}", (lambda act: lambda x, y, c: djx.add_mul_activation(x, y, c, -0.75, act))(act), ((4, 6), (1, 6), (6,)), (lambda act: lambda x, y, c: ama_ref(act, -0.75, x, y, c))(act)
    yield "matmul_add_relu", djx.matmul_add_relu, ((2, 5, 8), (8, 6), (5, 1)), lambda a, b, c: mm_ref("relu", a, b, c)
    yield "matmul_add_residual", djx.matmul_add_residual, ((5, 8), (3, 8, 6), (6,), (5, 6)), lambda a, b, c, r: mm_ref("identity", a, b, c, r)


CASES = list(cases())


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def case(request):
    return request.param


def _inputs(rng, shapes, dtype, device):
    xs = [rand(rng, s, dtype, device) for s in shapes]
    return xs, [f64(x) for x in xs]


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_forward(case, dtype, device, rng, mode):
    name, fn, shapes, ref = case
    xs, xs64 = _inputs(rng, shapes, dtype, device)
    got = (jax.jit(fn) if mode == "jit" else fn)(*xs)
    assert got.dtype == xs[0].dtype and got.devices() == {device}
    out, scale, _ = ref(*xs64)
    check(got, out, scale, dtype, name)


@pytest.mark.parametrize("mode", ["grad", "jit_of_grad", "vjp"])
def test_gradients(case, dtype, device, rng, mode):
    name, fn, shapes, ref = case
    xs, xs64 = _inputs(rng, shapes, dtype, device)
    out_k = fn(*xs)
    ct = rand(rng, out_k.shape, dtype, device)
    argnums = tuple(range(len(xs)))
    if mode == "vjp":
        _, pullback = jax.vjp(fn, *xs)
        got = pullback(ct)
    else:
        g = jax.grad(lambda *a: jnp.sum((fn(*a) * ct).astype(jnp.float32)), argnums=argnums)
        got = (jax.jit(g) if mode == "jit_of_grad" else g)(*xs)
    _, _, grads = ref(*xs64)
    for i, (g, (r, s)) in enumerate(zip(got, grads(f64(ct), f64(out_k)))):
        assert g.dtype == xs[i].dtype
        check(g, r, s, dtype, f"{name} grad {i}")


def test_grad_of_some_inputs(rng, device):
    """Only the gradients asked for are computed; the others are zero, never garbage."""
    a, b, bias = (rand(rng, s, "float32", device) for s in ((4, 8), (8, 3), (3,)))
    gb = jax.jit(jax.grad(lambda b: jnp.sum(djx.matmul_add_relu(a, b, bias))))(b)
    _, _, grads = mm_ref("relu", f64(a), f64(b), f64(bias))
    out = f64(djx.matmul_add_relu(a, b, bias))
    r, s = grads(np.ones_like(out), out)[1]
    check(gb, r, s, "float32", "grad_b alone")
    hlo = jax.jit(jax.grad(lambda b: jnp.sum(djx.matmul_add_relu(a, b, bias)))).lower(b).as_text()
    bwd = [line for line in hlo.splitlines() if '"matmul_add_relu_backward"' in line]
    # grad_b only: the outputs attribute maps grad_a and grad_bias to NULL (-1)
    assert len(bwd) == 1 and re.search(r"outputs = [^,]*?0, -1, 0, -1\b", bwd[0]), bwd


@pytest.mark.parametrize("act, writes_pre", [("relu", False), ("tanh", False), ("gelu_tanh", True), ("silu", True)])
def test_forward_keeps_what_the_backward_plan_names(device, act, writes_pre):
    """The forward writes pre and the backward reads it only where libdlfuse's backward plan
    says (an activation whose derivative is not a function of its output); else out."""
    a, b, bias = (jnp.ones(s, jnp.float32) for s in ((4, 8), (8, 3), (3,)))
    hlo = jax.jit(jax.grad(lambda a: jnp.sum(djx.matmul_add_activation(a, b, bias, act)))).lower(a).as_text()
    fwd = [line for line in hlo.splitlines() if 'op = "matmul_add_activation"' in line]
    bwd = [line for line in hlo.splitlines() if '"matmul_add_activation_backward"' in line]
    assert len(fwd) == 1 and len(bwd) == 1, hlo
    # outputs: a leading placeholder, then out and pre (-1: NULL)
    assert re.search(r"outputs = [^,]*?0, 0, 1\b" if writes_pre else r"outputs = [^,]*?0, 0, -1\b", fwd[0]), fwd
    # inputs: a placeholder, grad_out, a, b, out, pre (-1: NULL)
    assert re.search(r"inputs = [^,]*?0, 0, 1, 2, -1, 3\b" if writes_pre else r"inputs = [^,]*?0, 0, 1, 2, 3, -1\b",
                     bwd[0]), bwd
    assert djx.matmul_add_activation(a, b, bias, act).shape == (4, 3)  # out alone, without grad


@pytest.mark.parametrize("in_axes", [(0, None, None), (None, 0, None), (0, 0, 0), (None, None, 0)])
def test_vmap_forward(rng, device, in_axes):
    shapes = ((5, 8), (8, 6), (6,))
    xs = [rand(rng, (3, *s) if ax == 0 else s, "float32", device) for s, ax in zip(shapes, in_axes)]
    fn = lambda a, b, c: djx.matmul_add_activation(a, b, c, "gelu_tanh")  # noqa: E731
    got = jax.jit(jax.vmap(fn, in_axes=in_axes))(*xs)
    for i in range(3):
        one = [f64(x[i] if ax == 0 else x) for x, ax in zip(xs, in_axes)]
        out, scale, _ = mm_ref("gelu_tanh", *one)
        check(got[i], out, scale, "float32", f"vmap {in_axes} [{i}]")


@pytest.mark.parametrize("in_axes", [(0, None, None), (0, 0, None), (None, 0, 0)])
def test_vmap_of_grad(rng, device, in_axes):
    """Per-example gradients: vmap(grad(f)) against one reference per example."""
    shapes = ((4, 8), (8, 6), (6,))
    xs = [rand(rng, (3, *s) if ax == 0 else s, "float32", device) for s, ax in zip(shapes, in_axes)]
    loss = lambda a, b, c: jnp.sum(jnp.tanh(djx.matmul_add_activation(a, b, c, "silu")))  # noqa: E731
    got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=in_axes))(*xs)
    for i in range(3):
        one = [x[i] if ax == 0 else x for x, ax in zip(xs, in_axes)]
        out_k = f64(djx.matmul_add_activation(*one, "silu"))
        _, _, grads = mm_ref("silu", *(f64(x) for x in one))
        ct = 1 - np.tanh(out_k) ** 2
        for j, (r, s) in enumerate(grads(ct, out_k)):
            check(got[j][i], r, s, "float32", f"vmap grad {in_axes} [{i}] input {j}")


def test_vmap_add_mul_activation(rng, device):
    x = rand(rng, (3, 4, 6), "float32", device)
    bias = rand(rng, (3, 6), "float32", device)  # a per-example bias: batched, lower rank
    y = rand(rng, (6,), "float32", device)
    got = jax.vmap(djx.add_mul_activation, in_axes=(0, None, 0, None, None))(x, y, bias, 2.0, "tanh")
    for i in range(3):
        out, scale, _ = ama_ref("tanh", 2.0, f64(x[i]), f64(y), f64(bias[i]))
        check(got[i], out, scale, "float32", f"vmap add_mul [{i}]")


@pytest.mark.parametrize("act", ["tanh", "gelu_erf"])  # backward from out; from x, y, bias
def test_vmap_of_grad_add_mul_activation(rng, device, act):
    x = rand(rng, (3, 4, 6), "float32", device)
    y, bias = rand(rng, (1, 6), "float32", device), rand(rng, (6,), "float32", device)
    loss = lambda x, y, b: jnp.sum(djx.add_mul_activation(x, y, b, 1.5, act) ** 2)  # noqa: E731
    got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(0, None, None)))(x, y, bias)
    for i in range(3):
        out_k = f64(djx.add_mul_activation(x[i], y, bias, 1.5, act))
        _, _, grads = ama_ref(act, 1.5, f64(x[i]), f64(y), f64(bias))
        for j, (r, s) in enumerate(grads(2 * out_k, out_k)):
            check(got[j][i], r, s, "float32", f"vmap grad add_mul {act} [{i}] input {j}")


def test_nested_vmap(rng, device):
    """Two vmaps: each level's batch dim broadcasts as one more batch dim of the op."""
    x = rand(rng, (2, 3, 4, 8), "float32", device)
    w = rand(rng, (3, 8, 5), "float32", device)
    bias = rand(rng, (5,), "float32", device)
    inner = jax.vmap(djx.matmul_add_relu, in_axes=(0, 0, None))      # over the 3
    got = jax.jit(jax.vmap(inner, in_axes=(0, None, None)))(x, w, bias)  # over the 2
    out, scale, _ = mm_ref("relu", f64(x), f64(w), f64(bias))
    check(got, out, scale, "float32", "nested vmap")


def test_zero_size(device):
    """Empty outputs are valid (the call runs no kernel); K = 0 gives act(bias)."""
    dev = functools.partial(jax.device_put, device=device)
    b, bias = dev(jnp.ones((3, 5))), dev(jnp.arange(5.0) - 2)
    assert djx.matmul_add_relu(dev(jnp.ones((0, 3))), b, bias).shape == (0, 5)
    got = jax.jit(djx.matmul_add_relu)(dev(jnp.ones((4, 0))), dev(jnp.ones((0, 5))), bias)
    np.testing.assert_array_equal(np.asarray(got), np.maximum(np.arange(5.0) - 2, 0)[None].repeat(4, 0))
    g = jax.grad(lambda b: jnp.sum(djx.matmul_add_relu(dev(jnp.ones((0, 3))), b, bias)))(b)
    np.testing.assert_array_equal(np.asarray(g), 0)


def test_mlp_4_layers_trained_under_jit(device):
    """examples/jax_mlp.py's 4-layer MLP, small: dlfuse's float32 training run stays as close to
    the float64 run as jax.numpy's float32 run does, and its loss falls."""
    ld, l32, l64 = jax_mlp.run(device, steps=60, batch=256, width=64, hidden=128)
    ok, msg = jax_mlp.verdict(ld, l32, l64)
    assert ok, msg


def test_ops_known_only_by_their_schema():
    """A plugin's own ops in the default registry are dlfuse.jax functions derived from their
    schemas, differentiable through their backward (tests/jax_derived_ops.py, in a process
    of its own: the default registry is made once per process)."""
    plugins = [os.path.join(os.environ.get("DLFUSE_TEST_PLUGIN_DIR", ""), "libdlfuse_testref_ops.so"),
               os.environ.get("DLFUSE_EXAMPLE_PLUGIN", "")]
    if not all(os.path.isfile(p) for p in plugins):
        pytest.skip("testref_ops or the cxx_plugin example not built (DLFUSE_TEST_PLUGIN_DIR, DLFUSE_EXAMPLE_PLUGIN)")
    env = dict(os.environ, DLFUSE_PLUGIN_PATH=":".join(plugins), PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(dlfuse.__file__)))] + sys.path))
    modes = [[]] + ([["cuda"]] if _jax_cuda() and cuda_plugin_available() else [])
    for mode in modes:
        p = subprocess.run([sys.executable, os.path.join(HERE, "jax_derived_ops.py"), *mode],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (mode, p.stdout + p.stderr)


def test_handlers_beside_command_buffers(device):
    """On CUDA the handler is not command-buffer compatible (csrc/jax_ffi.cpp says why): with
    XLA's command buffers on for custom calls, every dlfuse call of a jitted training step stays
    outside them and the step still gives the right results, as with command buffers off."""
    if device.platform == "cpu":
        pytest.skip("XLA's command buffers are CUDA graphs")
    res = {}
    for mode in ("on", "off"):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(dlfuse.__file__)))] + sys.path))
        p = subprocess.run([sys.executable, os.path.join(HERE, "jax_command_buffers.py"), mode],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        res[mode] = json.loads(p.stdout.strip().splitlines()[-1])
    for mode in ("on", "off"):
        assert res[mode]["inside"] == 0 and res[mode]["outside"] >= 5, res
        assert res[mode]["max_rel_err"] < 1e-4, res


# ---- errors -----------------------------------------------------------------------------------

def test_trace_time_errors_name_the_argument():
    a, b, bias = jnp.ones((4, 3)), jnp.ones((3, 5)), jnp.ones((5,))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"matmul_add_relu: argument 'b': shape\[-2\] \(K\) is 4; expected 3"):
        jax.jit(djx.matmul_add_relu)(a, jnp.ones((4, 5)), bias)
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"argument 'bias': shape is \[7\]; expected a shape that broadcasts"):
        djx.matmul_add_relu(a, b, jnp.ones((7,)))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"argument 'residual': shape is \[2, 4, 5\]; expected a shape"):
        djx.matmul_add_residual(a, b, bias, jnp.ones((2, 4, 5)))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"argument 'a': ndim is 1; expected >= 2"):
        djx.matmul_add_activation(jnp.ones((3,)), b, bias, "relu")
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"bias: expected dtype float32"):
        djx.matmul_add_relu(a, b, bias.astype(jnp.float16))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"x: expected a dtype of float32"):
        djx.add_mul_activation(jnp.ones(3, jnp.int32), jnp.ones(3, jnp.int32), jnp.ones(3, jnp.int32))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"argument 'y' \[2, 3\] does not broadcast with x's shape \[4, 3\]"):
        jax.jit(djx.add_mul_activation)(jnp.ones((4, 3)), jnp.ones((2, 3)), bias[:3])
    with pytest.raises(ValueError, match="activation must be one of"):
        djx.add_mul_activation(a, a, a, 1.0, "swish")
    with pytest.raises(ValueError, match="activation must be one of"):
        djx.matmul_add_activation(a, b, bias, 9)


def test_trace_time_checks_are_the_ops_own_rules():
    """Shapes come from libdlfuse's inference, which applies the op's own rules: gelu's
    gradient from `out` (it needs `pre`) is refused when traced, naming the argument."""
    from dlfuse import _jax_ffi
    a, b, out = jnp.ones((4, 3)), jnp.ones((3, 5)), jnp.ones((4, 5))
    f = jax.jit(lambda g, a, b, o: _jax_ffi.call(
        "matmul_add_activation_backward", dict(grad_out=g, a=a, b=b, out=o), ("grad_a",),
        {dlfuse._ext.ATTR_ACTIVATION: 4}, {"bias": (5,)}))
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"argument 'out' is given with ACTIVATION GELU_ERF"):
        f(out, a, b, out)
    with pytest.raises(dlfuse.InvalidArgumentError, match=r"bias: expected a shape that broadcasts to \(4, 5\)"):
        _jax_ffi.call("matmul_add_relu_backward", dict(grad_out=out, a=a, b=b, out=out), ("grad_bias",),
                      {}, {"bias": (3,)})


def _raw_call(op, args, result, inputs, outputs, i64_attrs=(0,)):
    """The FFI call without dlfuse.jax's trace-time checks: what reaches the handler."""
    from dlfuse import _jax_ffi
    return jax.ffi.ffi_call(_jax_ffi.TARGET, result)(
        *args, op=op, inputs=np.array(inputs, np.int64), outputs=np.array(outputs, np.int64),
        i64_attrs=np.array(i64_attrs, np.int64), f64_keys=np.array([0]), f64_values=np.array([0.0]))


def test_run_time_refusal_is_a_jax_error_with_dlfuse_message(device):
    """What the handler's dlfuse_op_call refuses (here gelu's gradient from `out`, past the
    trace-time checks) comes back as JAX's error carrying dlfuse's status and message; the
    process lives on."""
    a, b = jnp.ones((4, 3)), jnp.ones((3, 5))
    a, b = jax.device_put(a, device), jax.device_put(b, device)
    out = jax.device_put(jnp.ones((4, 5)), device)
    # inputs grad_out, a, b, out, pre -> positions 0..3, pre absent; grad_a only; ACTIVATION 4
    f = jax.jit(lambda g, a, b, o: _raw_call(
        "matmul_add_activation_backward", (g, a, b, o), jax.ShapeDtypeStruct(a.shape, a.dtype),
        [0, 0, 1, 2, 3, -1], [0, 0, -1, -1], (0, dlfuse._ext.ATTR_ACTIVATION, 4)))
    with pytest.raises(Exception, match=r"dlfuse matmul_add_activation_backward: "
                                        r"\[INVALID_ARGUMENT\] .*GELU_ERF"):
        jax.block_until_ready(f(out, a, b, out))
    unknown = jax.jit(lambda x: _raw_call("no_such_op", (x,), jax.ShapeDtypeStruct(x.shape, x.dtype), [0, 0], [0, 0]))
    with pytest.raises(Exception, match=r"dlfuse no_such_op: \[NOT_FOUND\]"):
        jax.block_until_ready(unknown(a))
    np.testing.assert_allclose(np.asarray(djx.matmul_add_relu(a, b, b[0])), 4.0)  # still fine


def test_float64_needs_a_plugin_that_has_it():
    """Without x64 JAX has no float64; with it, the CPU call goes to a plugin that serves it
    (the test plugin here) or fails as a JAX error, never silently in another dtype."""
    with jax.enable_x64(True):
        a = jax.device_put(jnp.ones((2, 2), jnp.float64), jax.devices("cpu")[0])
        if _has_f64("cpu"):
            assert djx.matmul_add_relu(a, a, a).dtype == jnp.float64
        else:
            with pytest.raises(Exception, match=r"\[UNSUPPORTED\]"):
                jax.block_until_ready(djx.matmul_add_relu(a, a, a))


def test_mlp_jit_and_grad(rng, device):
    """dlfuse.jax.mlp, derived from the op's schema: a 3-layer MLP under jit, and its
    gradients through mlp_backward, against the same layers in jax.numpy."""
    sizes = (13, 16, 8, 1)
    x = rand(rng, (6, sizes[0]), "float32", device)
    ws = [rand(rng, (i, o), "float32", device) for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [rand(rng, (o,), "float32", device) for o in sizes[1:]]
    pad = (None,) * 4

    def fused(x, ws, bs):
        return djx.mlp(x, *ws, *pad, *bs, *pad, activation="relu", output_activation="sigmoid")

    def plain(x, ws, bs):  # full float32 matmuls: JAX's default on a GPU is TF32
        for i, (w, b) in enumerate(zip(ws, bs)):
            z = jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST) + b
            x = jax.nn.relu(z) if i < len(ws) - 1 else jax.nn.sigmoid(z)
        return x

    np.testing.assert_allclose(f64(jax.jit(fused)(x, ws, bs)), f64(plain(x, ws, bs)), rtol=1e-4, atol=1e-5)
    # outputs= asks for hidden layers' outputs too (optional outputs: not returned by default)
    out, h0 = djx.mlp(x, *ws, *pad, *bs, *pad, activation="relu", output_activation="sigmoid",
                      outputs=("out", "h0"))
    h0_ref = jax.nn.relu(jnp.matmul(x, ws[0], precision=jax.lax.Precision.HIGHEST) + bs[0])
    np.testing.assert_allclose(f64(h0), f64(h0_ref), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f64(out), f64(plain(x, ws, bs)), rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="outputs names 'h9'"):
        djx.mlp(x, *ws, *pad, *bs, *pad, activation="relu", outputs=("h9",))
    loss = lambda f: lambda x, ws, bs: jnp.sum(f(x, ws, bs) ** 2)  # noqa: E731
    got = jax.jit(jax.grad(loss(fused), argnums=(0, 1, 2)))(x, ws, bs)
    want = jax.grad(loss(plain), argnums=(0, 1, 2))(x, ws, bs)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(f64(g), f64(w), rtol=1e-4, atol=1e-5)


def test_handlers_refuse_an_older_jaxlib(monkeypatch):
    """The handlers name the jaxlib they were built against; an older running one is refused
    by name (ImportError), a later one or the same one is accepted."""
    import ctypes
    import importlib.metadata
    from dlfuse import _jax_ffi
    lib = ctypes.CDLL(_jax_ffi._library_file())
    lib.dlfuse_jax_built_against.restype = ctypes.c_char_p
    built = lib.dlfuse_jax_built_against().decode()
    assert built == importlib.metadata.version("jaxlib")  # this build's own jaxlib
    major, minor, _ = _jax_ffi._release(built)
    for running, ok in ((f"{major}.{minor + 1}.0", True), (f"{major}.{minor + 1}.0rc1", True), (built, True),
                        (f"{major}.{minor - 1}.9" if minor else f"{major - 1}.99.0", False)):
        monkeypatch.setattr(importlib.metadata, "version", lambda name, v=running: v)
        if ok:
            _jax_ffi._check_jaxlib(lib)
        else:
            with pytest.raises(ImportError, match=rf"built against jaxlib {re.escape(built)}; this Python runs "
                               rf"jaxlib {re.escape(running)}: expected jaxlib >= {re.escape(built)}"):
                _jax_ffi._check_jaxlib(lib)
    assert _jax_ffi._release("0.11.0.dev20261101") == (0, 11, 0) and _jax_ffi._release("1.2") == (1, 2, 0)
