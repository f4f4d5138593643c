"""dlfuse.torch over the ops of ABI 1.1: matmul_add_activation, matmul_add_residual and
add_mul_activation's backward from `out`. Forward values and gradients against float64
torch (torch.autograd.grad of the plain formula) for every activation, with broadcast
bias/residual and batches; what autograd keeps for the backward; an in-place change of a
saved output caught; opcheck; torch.compile(fullgraph=True). Each case runs through the
two paths of docs/python.md: the public function on plain tensors (the operator's autograd
kernel directly) and the public function under a torch-function mode (the dispatcher). CPU: oneDNN for float32/float16/bfloat16, the test
plugin for float64; CUDA where a plugin serves the op (docs/ops.md)."""
import gc
import os
import weakref

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import dlfuse  # noqa: E402
import dlfuse.torch as dft  # noqa: E402

from test_torch import dev  # noqa: E402,F401  (the device fixture: cpu, and cuda where present)

ACTS = ["identity", "relu", "sigmoid", "tanh", "gelu_erf", "gelu_tanh", "silu"]
OUT_FORM = {"identity", "relu", "sigmoid", "tanh"}
TORCH_ACT = {"identity": lambda p: p, "relu": torch.relu, "sigmoid": torch.sigmoid,
             "tanh": torch.tanh, "gelu_erf": F.gelu,
             "gelu_tanh": lambda p: F.gelu(p, approximate="tanh"), "silu": F.silu}
IMPLS = ["fast", "dispatch"]
# (rtol, atol) against float64 on the values the kernel saw, |err| <= atol + rtol * scale
# with scale the float64 sum of |terms| (docs/ops.md, "Tolerances").
TOL = {torch.float64: (1e-12, 1e-300), torch.float32: (2e-5, 1e-5),
       torch.float16: (4e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}


class _ThroughMode(torch.overrides.TorchFunctionMode):
    """A do-nothing torch-function mode: under it dlfuse.torch takes the custom-op path."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _call(impl, public, *args):
    if impl == "fast":
        return public(*args)
    with _ThroughMode():
        return public(*args)


def _check_path(impl, out, op_name):
    if dft.CPP_OPS:  # the C++ operator, its backward the C++ node of the op
        assert out.grad_fn.name() == f"dlfuse::{op_name}Backward", out.grad_fn.name()
    else:
        assert op_name in type(out.grad_fn).__name__, type(out.grad_fn).__name__


def _saved_tensors(out):
    """What the backward node saved (None where the plan keeps nothing), without the Nones;
    None for a C++ node (the C++ operators), which does not show it: the tests then check
    what was freed instead."""
    saved = getattr(out.grad_fn, "saved_tensors", None)
    return None if saved is None else [t for t in saved if t is not None]


def _keeps_out(device, dtype=torch.float32):
    """Whether libdlfuse's backward plan keeps add_mul_activation's out (relu) on device: the
    kernel serving the backward takes the out form."""
    code, bits = {torch.float32: (2, 32), torch.float64: (2, 64)}[dtype]
    dev = dlfuse._core.DEVICE_TYPES[device]
    _bwd, keep, _write = dlfuse._ext.backward_plan("add_mul_activation", {"activation": 1}, dev, code, bits, None)
    return keep == 0b10001


def _need(op, device, dtype=torch.float32):
    try:
        dlfuse.registry().resolve(op, device, str(dtype).split(".")[1])
    except dlfuse.Error as e:
        pytest.skip(f"no plugin serves {op} on {device} {dtype}: {e}")


def close(got, ref, scale, dtype=torch.float32):
    rtol, atol = TOL[dtype]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    got, ref, scale = got.double().cpu(), ref.double().cpu(), scale.double().cpu()  # references may be built on the CPU
    err = (got - ref).abs()
    bad = (err > atol + rtol * torch.maximum(scale, ref.abs())) | (got.isnan() != ref.isnan())
    assert not bad.any(), f"{int(bad.sum())} bad of {bad.numel()}, max err {err.max().item()}"


def _rand(gen, shape, device, dtype=torch.float32):
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).to(device=device, dtype=dtype)


def _leaves(gen, shapes, device, dtype=torch.float32):
    return [_rand(gen, s, device, dtype).requires_grad_() for s in shapes]


def _act_slope(act, pre64):
    """max(1, |act'(pre)|): how much an error in pre can grow through the activation."""
    p = pre64.detach().clone().requires_grad_()
    (d,) = torch.autograd.grad(TORCH_ACT[act](p).sum(), p)
    return torch.clamp(d.abs(), min=1.0)


def _abs_sum_scales(fn, inputs, w):
    """The float64 sums of |terms|: the gradients of sum(w * fn(|inputs|)), fn linear in
    each input (a matmul plus adds), with w >= 0; broadcasting and reduction come with it."""
    xs = [t.detach().double().abs().requires_grad_() for t in inputs]
    return torch.autograd.grad((w * fn(*xs)).sum(), xs)


def _mm(a, b, bias):
    return a @ b + bias


# a, b, bias shapes: plain, batched a with a column bias, a broadcast over b's batch with a
# full bias, and 4-D batch broadcasting on both sides
MM_CASES = [((5, 7), (7, 6), (6,)), ((3, 5, 7), (7, 6), (5, 1)), ((5, 7), (2, 7, 6), (2, 5, 6)),
            ((2, 1, 5, 7), (3, 7, 6), (1, 6))]


def _check_matmul_add_activation(impl, act, device, dtype, gen, shapes):
    a, b, bias = _leaves(gen, shapes, device, dtype)
    out = _call(impl, dft.matmul_add_activation, a, b, bias, act)
    _check_path(impl, out, "matmul_add_activation")
    g = _rand(gen, out.shape, device, dtype)
    got = torch.autograd.grad(out, (a, b, bias), g)

    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    pre64 = _mm(a64, b64, bias64)
    ref = TORCH_ACT[act](pre64)
    want = torch.autograd.grad(ref, (a64, b64, bias64), g.double())
    slope = _act_slope(act, pre64)
    z = _mm(*(t.detach().double().abs() for t in (a, b, bias)))
    close(out, ref.detach(), z * slope, dtype)
    for x, w, s in zip(got, want, _abs_sum_scales(_mm, (a, b, bias), g.double().abs() * slope)):
        close(x, w, s, dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", ACTS)
def test_matmul_add_activation_values_and_grads(dev, impl, act):
    _need("matmul_add_activation", dev)
    _need("matmul_add_activation_backward", dev)
    gen = torch.Generator().manual_seed(ACTS.index(act))
    for shapes in MM_CASES:
        _check_matmul_add_activation(impl, act, dev, torch.float32, gen, shapes)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("act", ["relu", "tanh", "gelu_erf", "silu"])
def test_matmul_add_activation_dtypes(dev, dtype, act):
    _need("matmul_add_activation", dev, dtype)
    _need("matmul_add_activation_backward", dev, dtype)
    gen = torch.Generator().manual_seed(7)
    for shapes in MM_CASES[:2]:
        _check_matmul_add_activation("fast", act, dev, dtype, gen, shapes)


@pytest.mark.parametrize("impl", IMPLS)
def test_matmul_add_activation_only_needed_grads(dev, impl):
    _need("matmul_add_activation", dev)
    gen = torch.Generator().manual_seed(3)
    a = _rand(gen, (6, 4), dev)                       # data: no grad
    b, bias = _leaves(gen, [(4, 3), (3,)], dev)
    _call(impl, dft.matmul_add_activation, a, b, bias, "silu").sum().backward()
    assert a.grad is None and b.grad is not None and bias.grad is not None
    with torch.no_grad():                             # no grad: the extension directly
        out = dft.matmul_add_activation(a, b, bias, "silu")
    assert out.grad_fn is None and not out.requires_grad
    close(out, F.silu(_mm(a.double(), b.detach().double(), bias.detach().double())),
          _mm(a.double().abs(), b.detach().double().abs(), bias.detach().double().abs()))


def _nonleaf(gen, shapes, device):
    """Inputs that autograd's graph does not hold by itself (clones of leaves), so a weak
    reference to one dies unless dlfuse's node saved it."""
    leaves = _leaves(gen, shapes, device)
    return leaves, [t.clone() for t in leaves]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", ACTS)
def test_matmul_add_activation_saves_out_or_pre(dev, impl, act):
    _need("matmul_add_activation", dev)
    gen = torch.Generator().manual_seed(11)
    leaves, (a, b, bias) = _nonleaf(gen, [(5, 4), (4, 3), (3,)], dev)
    out = _call(impl, dft.matmul_add_activation, a, b, bias, act)
    saved = _saved_tensors(out)
    if saved is not None:
        assert len(saved) == 3
        assert saved[0] is a or saved[0].data_ptr() == a.data_ptr()
        pre64 = _mm(a.detach().double(), b.detach().double(), bias.detach().double())
        if act in OUT_FORM:
            assert saved[2].data_ptr() == out.data_ptr()      # out itself, no pre written
        else:
            assert saved[2].data_ptr() != out.data_ptr()      # pre, which the forward wrote
            close(saved[2], pre64, _mm(*(t.detach().double().abs() for t in (a, b, bias))))
    gone = weakref.ref(bias)
    del bias, saved
    gc.collect()
    assert gone() is None, "the bias (only its shape is needed) was kept alive"
    out.sum().backward()
    assert all(t.grad is not None for t in leaves)


# x, y, bias shapes for add_mul_activation: out [3, 4, 6] with y and bias broadcast, and x
# broadcast (its gradient summed over the batch)
AM_CASES = [((3, 4, 6), (1, 6), (4, 1)), ((4, 6), (3, 1, 6), (6,))]


def _am(x, y, bias, m=0.5):
    return x + bias + m * y


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", ACTS)
def test_add_mul_activation_grads_all_activations(dev, impl, act):
    gen = torch.Generator().manual_seed(100 + ACTS.index(act))
    for shapes in AM_CASES:
        x, y, bias = _leaves(gen, shapes, dev)
        x.data.mul_(2)
        out = _call(impl, dft.add_mul_activation, x, y, bias, 0.5, act)
        _check_path(impl, out, "add_mul_activation")
        g = _rand(gen, out.shape, dev)
        got = torch.autograd.grad(out, (x, y, bias), g)
        x64, y64, b64 = (t.detach().double().requires_grad_() for t in (x, y, bias))
        pre64 = _am(x64, y64, b64)
        ref = TORCH_ACT[act](pre64)
        want = torch.autograd.grad(ref, (x64, y64, b64), g.double())
        slope = _act_slope(act, pre64)
        close(out, ref.detach(), _am(*(t.detach().double().abs() for t in (x, y, bias))) * slope)
        for v, w, s in zip(got, want, _abs_sum_scales(_am, (x, y, bias), g.double().abs() * slope)):
            close(v, w, s)


def test_cpu_kernels_take_the_out_form():
    """docs/ops.md: the oneDNN and test plugins serve add_mul_activation_backward from out, so
    the backward plan keeps out for relu on CPU; for silu it keeps x, y and bias; a device no
    plugin serves gets the inputs form (the forward fails anyway)."""
    if not any(p.available and p.device == "cpu" for p in dlfuse.plugins()):
        pytest.skip("no CPU plugin")
    assert _keeps_out("cpu")
    _bwd, keep, write = dlfuse._ext.backward_plan("add_mul_activation", {"activation": "silu"}, 1, 2, 32, None)
    assert (_bwd, keep, write) == ("add_mul_activation_backward", 0b01111, 1)
    _bwd, keep, _write = dlfuse._ext.backward_plan("add_mul_activation", {"activation": 1}, 7, 2, 32, None)
    assert keep == 0b01111


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", ACTS)
def test_add_mul_activation_keeps_only_out(dev, impl, act):
    """identity/relu/sigmoid/tanh: only out is saved (x, y, bias are freed once the caller
    drops them) where the kernel takes the out form; gelu/silu keep x, y and bias."""
    gen = torch.Generator().manual_seed(200 + ACTS.index(act))
    leaves, (x, y, bias) = _nonleaf(gen, [(8, 6), (8, 6), (6,)], dev)
    out = _call(impl, dft.add_mul_activation, x, y, bias, 0.5, act)
    from_out = act in OUT_FORM and _keeps_out(dev)
    if dev == "cpu":
        assert from_out == (act in OUT_FORM)
    saved = _saved_tensors(out)
    if saved is not None and from_out:
        assert len(saved) == 1 and saved[0].data_ptr() == out.data_ptr()
    elif saved is not None:
        assert len(saved) == 3
    refs = [weakref.ref(t) for t in (x, y, bias)]
    del x, y, bias, saved
    gc.collect()
    assert [r() is None for r in refs] == [from_out] * 3
    g = _rand(gen, out.shape, dev)
    out.backward(g)
    x64, y64, b64 = (t.detach().double().requires_grad_() for t in leaves)
    pre64 = _am(x64, y64, b64)
    want = torch.autograd.grad(TORCH_ACT[act](pre64), (x64, y64, b64), g.double())
    slope = _act_slope(act, pre64)
    for t, w, s in zip(leaves, want, _abs_sum_scales(_am, leaves, g.double().abs() * slope)):
        close(t.grad, w, s)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("needs", [(True, False, False), (False, True, False), (False, False, True),
                                   (False, True, True)])
def test_add_mul_activation_partial_grads(dev, impl, needs):
    """Only the inputs that require grad get one, of their own (broadcast) shape."""
    gen = torch.Generator().manual_seed(250)
    x, y, bias = (_rand(gen, s, dev).requires_grad_(n) for s, n in zip(AM_CASES[1], needs))
    out = _call(impl, dft.add_mul_activation, x, y, bias, -0.7, "sigmoid")
    g = _rand(gen, out.shape, dev)
    out.backward(g)
    x64, y64, b64 = (t.detach().double().requires_grad_() for t in (x, y, bias))
    pre64 = _am(x64, y64, b64, -0.7)
    want = torch.autograd.grad(torch.sigmoid(pre64), (x64, y64, b64), g.double())
    scales = _abs_sum_scales(lambda a, b, c: _am(a, b, c, 0.7), (x, y, bias), g.double().abs())
    for t, n, w, s in zip((x, y, bias), needs, want, scales):
        if n:
            close(t.grad, w, s)
        else:
            assert t.grad is None


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", ["add_mul_activation", "matmul_add_activation"])
def test_in_place_change_of_saved_out_is_caught(dev, impl, op):
    """The saved out goes through save_for_backward: autograd's version counter sees a
    later in-place change and refuses the backward instead of using the changed values."""
    gen = torch.Generator().manual_seed(5)
    if op == "add_mul_activation":
        x, y, bias = _leaves(gen, [(4, 6), (4, 6), (6,)], dev)
        out = _call(impl, dft.add_mul_activation, x, y, bias, 1.0, "tanh")
        if not _keeps_out(dev):
            pytest.skip("this device's kernel reads x, y, bias, not out")
    else:
        _need("matmul_add_activation", dev)
        a, b, bias = _leaves(gen, [(4, 5), (5, 6), (6,)], dev)
        out = _call(impl, dft.matmul_add_activation, a, b, bias, "tanh")
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def _mres(a, b, bias, r):
    return a @ b + bias + r


# a, b, bias, residual: full residual, row and column residuals, a batch with a full
# residual, and a residual broadcast over the batch (its gradient summed)
RES_CASES = [((5, 7), (7, 6), (6,), (5, 6)), ((5, 7), (7, 6), (1, 6), (6,)),
             ((5, 7), (7, 6), (5, 6), (5, 1)), ((3, 5, 7), (7, 6), (6,), (3, 5, 6)),
             ((3, 5, 7), (3, 7, 6), (3, 1, 6), (5, 6))]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_matmul_add_residual_values_and_grads(dev, impl, dtype):
    _need("matmul_add_residual", dev, dtype)
    _need("matmul_add_residual_backward", dev, dtype)
    if impl != "fast" and dtype != torch.float32:
        pytest.skip("the other paths are checked in float32")
    gen = torch.Generator().manual_seed(400)
    for shapes in RES_CASES:
        a, b, bias, r = _leaves(gen, shapes, dev, dtype)
        out = _call(impl, dft.matmul_add_residual, a, b, bias, r)
        _check_path(impl, out, "matmul_add_residual")
        g = _rand(gen, out.shape, dev, dtype)
        got = torch.autograd.grad(out, (a, b, bias, r), g)
        xs = [t.detach().double().requires_grad_() for t in (a, b, bias, r)]
        ref = _mres(*xs)
        want = torch.autograd.grad(ref, xs, g.double())
        close(out, ref.detach(), _mres(*(t.detach().double().abs() for t in (a, b, bias, r))), dtype)
        for v, w, s in zip(got, want, _abs_sum_scales(_mres, (a, b, bias, r), g.double().abs())):
            close(v, w, s, dtype)


@pytest.mark.parametrize("impl", IMPLS)
def test_matmul_add_residual_keeps_a_and_b_only(dev, impl):
    _need("matmul_add_residual", dev)
    gen = torch.Generator().manual_seed(9)
    leaves, (a, b, bias, r) = _nonleaf(gen, [(5, 4), (4, 3), (3,), (5, 3)], dev)
    out = _call(impl, dft.matmul_add_residual, a, b, bias, r)
    saved = _saved_tensors(out)
    assert saved is None or len(saved) == 2
    del saved
    refs = weakref.ref(bias), weakref.ref(r)
    del bias, r
    gc.collect()
    assert [x() for x in refs] == [None, None]
    out.sum().backward()
    assert all(t.grad is not None for t in leaves)
    only = _leaves(gen, [(3,)], dev)[0]               # only the residual needs grad
    out = dft.matmul_add_residual(a.detach(), b.detach(), torch.zeros(3, device=dev),
                                  only.expand(5, 3))
    out.sum().backward()
    close(only.grad, torch.full((3,), 5.0, dtype=torch.float64), torch.full((3,), 5.0))


def test_opcheck_abi11(dev):
    _need("matmul_add_activation", dev)
    _need("matmul_add_residual", dev)
    gen = torch.Generator().manual_seed(1)
    a, b, bias = _leaves(gen, [(5, 4), (4, 3), (3,)], dev)
    plain = [t.detach() for t in (a, b, bias)]
    for act, needs in [(0, [True, False]), (1, []), (3, [True, False]), (4, [True, True]), (6, []),
                       (5, [True, False])]:
        torch.library.opcheck(torch.ops.dlfuse.matmul_add_activation.default, (*plain, act, 0, needs))
        if dft.CPP_OPS or act < 4 or needs != [True, False]:  # else refused: the backward reads pre
            torch.library.opcheck(torch.ops.dlfuse.matmul_add_activation.default, (a, b, bias, act, 0, needs))
    r = _leaves(gen, [(5, 1)], dev)[0]
    torch.library.opcheck(torch.ops.dlfuse.matmul_add_residual.default, (a, b, bias, r, 0))
    x, y = _leaves(gen, [(5, 3), (1, 3)], dev)
    for act in (1, 2, 6):   # relu and sigmoid from out (where served), silu from x, y, bias
        torch.library.opcheck(torch.ops.dlfuse.add_mul_activation.default, (x, y, bias, act, 0.5))
    g, out = _rand(gen, (5, 3), dev), _rand(gen, (5, 3), dev)
    if _keeps_out(dev):
        torch.library.opcheck(torch.ops.dlfuse.add_mul_activation_backward.default,
                              (g, None, None, None, out, 2, 0.5, [True, True, False], [], [5, 3], [1, 3], [3]))
    torch.library.opcheck(torch.ops.dlfuse.matmul_add_residual_backward.default,
                          (g, a.detach(), b.detach(), 0, [True, False, True, True], [], [3], [5, 1]))
    torch.library.opcheck(torch.ops.dlfuse.matmul_add_activation_backward.default,
                          (g, a.detach(), b.detach(), out, None, 3, 0, [], [], [3]))


def test_backward_plan_writes_pre_where_the_gradient_reads_it(dev):
    """The operator asked for `out` alone (needs) still writes `pre` when an input requires
    grad and the activation's derivative reads it (gelu, silu): the backward plan's outputs.
    With the C++ operators their autograd adds it; the Python operators refuse, naming it."""
    _need("matmul_add_activation", dev)
    gen = torch.Generator().manual_seed(2)
    a, b, bias = _leaves(gen, [(5, 4), (4, 3), (3,)], dev)
    if not dft.CPP_OPS:
        with pytest.raises(RuntimeError, match="reads output 'pre'"):
            torch.ops.dlfuse.matmul_add_activation(a, b, bias, 4, 0, [True, False])
        return
    out, pre = torch.ops.dlfuse.matmul_add_activation(a, b, bias, 4, 0, [True, False])
    assert pre.shape == out.shape
    got = torch.autograd.grad(out.sum(), (a, b, bias))
    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    want = torch.autograd.grad(F.gelu(a64 @ b64 + bias64).sum(), (a64, b64, bias64))
    for x, w in zip(got, want):
        torch.testing.assert_close(x.double(), w, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # no gradient: pre is not written
        assert torch.ops.dlfuse.matmul_add_activation(a, b, bias, 4, 0, [True, False])[1].shape == (0,)


def test_torch_compile_fullgraph_abi11(dev):
    _need("matmul_add_activation", dev)
    _need("matmul_add_residual", dev)
    torch.manual_seed(0)
    lin1 = torch.nn.Linear(16, 32).to(dev)
    lin2 = torch.nn.Linear(32, 32).to(dev)
    lin3 = torch.nn.Linear(32, 32).to(dev)
    bint = torch.randn(32, device=dev, requires_grad=True)
    seen = []

    def f(x):
        h = dft.matmul_add_activation(x, lin1.weight.t(), lin1.bias, "gelu_tanh")
        h2 = dft.matmul_add_activation(h, lin2.weight.t(), lin2.bias, "sigmoid")
        h3 = dft.matmul_add_residual(h2, lin3.weight.t(), lin3.bias, h)
        return dft.add_mul_activation(h3, h2, bint, 0.5, "relu").square().mean()

    def ref(x):
        h = F.gelu(x @ lin1.weight.t() + lin1.bias, approximate="tanh")
        h2 = torch.sigmoid(h @ lin2.weight.t() + lin2.bias)
        h3 = h2 @ lin3.weight.t() + lin3.bias + h
        return torch.relu(h3 + bint + 0.5 * h2).square().mean()

    def recording(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    x = torch.randn(12, 16, device=dev)
    params = [lin1.weight, lin1.bias, lin2.weight, lin2.bias, lin3.weight, lin3.bias, bint]
    want = ref(x)
    wgrads = torch.autograd.grad(want, params)
    for backend in ("inductor", recording):
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True, backend=backend)(x)
        grads = torch.autograd.grad(got, params)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for g, w in zip(grads, wgrads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert sum("dlfuse.matmul_add_activation" in s for s in seen) == 2, seen
    assert sum("dlfuse.matmul_add_residual" in s for s in seen) == 1, seen


def test_torch_compile_dynamic_shapes(dev):
    """dynamic=True: the saved shapes are symbolic in the trace; one graph serves every
    batch size (AOT autograd, so the backward ops are traced too)."""
    _need("matmul_add_activation", dev)
    _need("matmul_add_residual", dev)
    gen = torch.Generator().manual_seed(600)
    w1, b1, w2, b2, bi = _leaves(gen, [(8, 16), (16,), (16, 8), (8,), (8,)], dev)
    params = [w1, b1, w2, b2, bi]

    def f(x):
        h = dft.matmul_add_activation(x, w1, b1, "silu")
        r = dft.matmul_add_residual(h, w2, b2, x)
        return dft.add_mul_activation(r, x, bi, 0.5, "tanh").square().sum()

    def ref(x):
        r = F.silu(x @ w1 + b1) @ w2 + b2 + x
        return torch.tanh(r + bi + 0.5 * x).square().sum()

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (3, 5, 9):
        x = _rand(gen, (n, 8), dev).requires_grad_()
        got = torch.autograd.grad(cf(x), [x, *params])
        want = torch.autograd.grad(ref(x), [x, *params])
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act", ["relu", "tanh", "gelu_erf"])
def test_fused_linear(dev, act):
    _need("matmul_add_activation", dev)
    torch.manual_seed(1)
    layer = dft.FusedLinear(8, 5, activation=act, device=dev)
    plain = torch.nn.Linear(8, 5, device=dev)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 6, 8, device=dev)
    out = layer(x)
    ref = TORCH_ACT[act](plain(x))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    for p, q in zip(layer.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


_OUT_FORM_REFUSED = r"""
import sys, torch, dlfuse, dlfuse.torch as dft
dlfuse.load_plugin(sys.argv[1])
reg = dlfuse.registry()
gen = torch.Generator().manual_seed(31)
x, y, b = (torch.randn(*s, generator=gen).requires_grad_() for s in ((3, 4, 6), (4, 1), (6,)))
for act in ("identity", "relu", "sigmoid", "tanh"):
    out = dft.add_mul_activation(x, y, b, 0.5, act)    # keeps out alone
    reg.prefer("unit_echo", "add_mul_activation_backward")  # its kernel does not take `out`
    g = torch.randn(out.shape, generator=gen)
    try:
        torch.autograd.grad(out, (x, y, b), g)
    except (RuntimeError, dlfuse.Error) as e:
        assert "DLFUSE_KERNEL_TAKES_V1_1_INPUTS" in str(e), str(e)
    else:
        raise AssertionError("the backward ran with `out` on a kernel that does not take it")
    # a forward after the preference keeps x, y and bias (its plan asks the registry), and
    # the test plugin serves the backward: the gradients' shapes are x's, y's and b's
    out = dft.add_mul_activation(x, y, b, 0.5, act)
    got = torch.autograd.grad(out, (x, y, b), g)
    assert [t.shape for t in got] == [x.shape, y.shape, b.shape]
    reg.prefer(None, "add_mul_activation_backward")
print("refused OK")
"""


def test_out_form_refused_by_a_preferred_plugin_is_an_error():
    """A forward kept `out` alone (the CPU kernel takes the out form), then a plugin whose
    kernel lacks DLFUSE_KERNEL_TAKES_V1_1_INPUTS is preferred for the backward: the registry
    refuses `out` and the backward raises its message; the next forward's plan keeps the
    inputs instead. In a subprocess: the preference and the loaded test plugin must not leak
    into other tests."""
    import subprocess
    import sys
    v10 = os.path.join(os.environ.get("DLFUSE_TEST_PLUGIN_DIR", "/nonexistent"), "..", "unit_plugins",
                       "libdlfuse_unit_echo.so")
    if not os.path.exists(v10):
        pytest.skip("no unit_echo test plugin in this build (a build with the unit tests has it)")
    try:
        if dlfuse.registry().resolve("add_mul_activation_backward", "cpu") is None:
            raise dlfuse.Error(3, "none")
    except dlfuse.Error:
        pytest.skip("no CPU plugin")
    env = dict(os.environ)  # the package this process imported, wherever it comes from
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(dlfuse.__path__[0])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", _OUT_FORM_REFUSED, os.path.abspath(v10)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "refused OK" in r.stdout, r.stdout + r.stderr


def _plain_mlp(fused, x):
    """The same layers and parameters in plain PyTorch."""
    acts = {0: lambda p: p, 1: torch.relu, 2: torch.sigmoid, 3: torch.tanh}
    n = len(fused.layers)
    for i, lin in enumerate(fused.layers):
        x = acts[fused.activation if i < n - 1 else fused.output_activation](F.linear(x, lin.weight, lin.bias))
    return x


@pytest.mark.parametrize("sizes,act,out_act", [((8, 5), "relu", "identity"),
                                               ((13, 16, 8, 1), "relu", "sigmoid"),
                                               ((6, 7, 5, 4, 3, 4, 5, 2), "tanh", "identity")])
def test_fused_mlp(dev, sizes, act, out_act):
    _need("mlp", dev)
    torch.manual_seed(2)
    mlp = dft.FusedMLP(sizes, activation=act, output_activation=out_act, device=dev)
    x = torch.randn(3, 4, sizes[0], device=dev, requires_grad=True)
    out = mlp(x)
    assert out.shape == (3, 4, sizes[-1])
    x_ref = x.detach().clone().requires_grad_()
    ref = _plain_mlp(mlp, x_ref)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    got = torch.autograd.grad(out.square().sum(), [x, *mlp.parameters()])
    want = torch.autograd.grad(ref.square().sum(), [x_ref, *mlp.parameters()])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_fused_mlp_refuses_what_it_cannot_train(dev):
    with pytest.raises(ValueError, match="activation is 4; expected identity, relu, sigmoid or tanh"):
        dft.FusedMLP((4, 3), activation="gelu_erf")
    with pytest.raises(ValueError, match="sizes has 9 entries; expected 2 to 8"):
        dft.FusedMLP(range(1, 10))
    mlp = dft.FusedMLP((4, 3), device=dev)
    with pytest.raises(ValueError, match=r"x has shape \(2, 5\); expected \[\.\.\., 4\]"):
        mlp(torch.randn(2, 5, device=dev))


def test_fused_mlp_compiles(dev):
    _need("mlp", dev)
    torch.manual_seed(3)
    mlp = dft.FusedMLP((6, 8, 3), device=dev)
    x = torch.randn(5, 6, device=dev)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x).square().sum(), list(mlp.parameters()))
    want = torch.autograd.grad(mlp(x).square().sum(), list(mlp.parameters()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_derived_mlp_op_differentiates_its_first_output_only(dev):
    _need("mlp", dev)
    torch.manual_seed(4)
    mlp = dft.FusedMLP((4, 6, 3), device=dev)
    x = torch.randn(5, 4, device=dev, requires_grad=True)
    w, b, pad = [l.weight.t() for l in mlp.layers], [l.bias for l in mlp.layers], [None] * 5
    out, h0, *unused = torch.ops.dlfuse.mlp(x, *w, *pad, *b, *pad, 1)  # every output
    assert out.requires_grad and not h0.requires_grad and h0.shape == (5, 6)
    assert all(u.shape == (0,) for u in unused)
    # the autograd node is C++ where the C++ operators are loaded (csrc/torch_derived.cpp)
    assert (out.grad_fn.name() == "dlfuse::mlpBackward") == dft.CPP_OPS, out.grad_fn.name()
    (gx,) = torch.autograd.grad(out.sum(), [x])
    x_ref = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(_plain_mlp(mlp, x_ref).sum(), [x_ref])
    torch.testing.assert_close(gx, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(dlfuse.InvalidArgumentError, match="w1"):
        dft.mlp(x, w[0], torch.randn(7, 3, device=dev), *pad, *b, *pad, activation=1)


def test_derived_backward_writes_weight_gradients_in_the_weights_layout(dev):
    """Eager, with the C++ operators: grad_w of `weight.t()` is allocated in that view's
    layout, so the weight's own gradient is compact (no copy kernel in AccumulateGrad)."""
    _need("mlp", dev)
    if not dft.CPP_OPS:
        pytest.skip(f"the C++ operators are not loaded: {dft._torch_cpp.why_not}")
    torch.manual_seed(5)
    mlp = dft.FusedMLP((4, 6, 3), device=dev)
    x = torch.randn(5, 4, device=dev)
    W = [l.weight for l in mlp.layers]
    got = torch.autograd.grad(mlp(x).square().sum(), W)
    assert all(g.is_contiguous() for g in got), [g.stride() for g in got]
    want = torch.autograd.grad(_plain_mlp(mlp, x).square().sum(), W)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
