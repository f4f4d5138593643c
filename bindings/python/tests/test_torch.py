"""PyTorch: interop (CPU and, where present, CUDA with streams), autograd through the
derived functions and torch.library ops, opcheck, torch.compile(fullgraph=True), a short DLRM
run. Skipped as a whole when torch is not installed; with DLFUSE_REQUIRE_CUDA=1 the CUDA
cases fail instead of skipping when no CUDA plugin/GPU is there."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import dlfuse  # noqa: E402
import dlfuse.torch as dft  # noqa: E402

from conftest import REQUIRE_CUDA, cuda_plugin_available  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _cuda_ok():
    return torch.cuda.is_available() and cuda_plugin_available()


def _cpu_ok():
    return any(p.available and p.device == "cpu" for p in dlfuse.plugins())


def devices():
    out = [pytest.param("cpu", marks=pytest.mark.skipif(not _cpu_ok(), reason="no CPU plugin"))]
    if _cuda_ok() or REQUIRE_CUDA:
        out.append("cuda")
    else:
        out.append(pytest.param("cuda", marks=pytest.mark.skip(reason="no CUDA GPU/plugin")))
    return out


@pytest.fixture(params=devices())
def dev(request):
    if request.param == "cuda":
        assert _cuda_ok(), f"CUDA required: torch.cuda={torch.cuda.is_available()}, " \
                           f"plugins={dlfuse.plugins()}"
        torch.backends.cuda.matmul.allow_tf32 = False
    return request.param


def close(got, ref, dtype=torch.float32, scale=None):
    rtol, atol = {torch.float32: (2e-5, 1e-5), torch.float16: (4e-3, 1e-3),
                  torch.bfloat16: (1.6e-2, 1e-2)}[dtype]
    ref = ref.double()
    scale = ref.abs() if scale is None else torch.maximum(scale.double(), ref.abs())
    err = (got.double() - ref).abs()
    bad = (err > atol + rtol * scale) | (got.isnan() != ref.isnan())
    assert not bad.any(), f"{int(bad.sum())} bad of {bad.numel()}, max err {err.max().item()}"


def mar_ref(a, b, bias):
    a64, b64 = a.double(), b.double()
    z = a64 @ b64 + bias.double()
    return torch.where(z > 0, z, 0.0), a64.abs() @ b64.abs() + bias.double().abs()


def test_interop_zero_copy(dev):
    a = torch.randn(32, 16, device=dev)
    b = torch.randn(16, 8, device=dev)
    bias = torch.randn(8, device=dev)
    out = dlfuse.matmul_add_relu(a, b, bias)
    assert isinstance(out, torch.Tensor) and out.device == a.device
    ref, scale = mar_ref(a, b, bias)
    close(out, ref, scale=scale)
    again = torch.from_dlpack(out)
    assert again.data_ptr() == out.data_ptr()
    given = torch.full((32, 8), 1234.5, device=dev)
    p = given.data_ptr()
    assert dlfuse.matmul_add_relu(a, b, bias, out=given) is given and given.data_ptr() == p
    close(given, ref, scale=scale)


def test_exchange_api_used():
    """torch >= 2.10 exports through the DLPack exchange API (no capsule per tensor, torch's
    allocator and current stream); a build against an older dlpack.h would lose that."""
    from dlfuse import _ext
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < (2, 10):
        pytest.skip(f"torch {torch.__version__} has no exchange API")
    assert _ext.exchange_api(torch.Tensor) >= (1, 3)
    assert _ext.exchange_api(torch.zeros(1)) == _ext.exchange_api(torch.Tensor)


def test_strided_and_requires_grad_inputs(dev):
    w = torch.randn(8, 16, device=dev, requires_grad=True)   # nn.Linear layout
    x = torch.randn(20, 16, device=dev)
    bias = torch.randn(8, device=dev)
    out = dlfuse.matmul_add_relu(x, w.t(), bias)             # a transposed view, with grad
    ref, scale = mar_ref(x, w.detach().t(), bias)
    close(out, ref, scale=scale)


def test_dtype_errors_carry_c_message(dev):
    a = torch.randn(4, 4, device=dev)
    with pytest.raises(dlfuse.InvalidArgumentError, match="dtype is float16; expected float32"):
        dlfuse.add_mul_activation(a, a.half(), a[0])
    with pytest.raises(dlfuse.UnsupportedError, match="no kernel"):
        dlfuse.add_mul_activation(a.int(), a.int(), a[0].int())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(dev, dtype):
    try:
        dlfuse.registry().resolve("matmul_add_relu", dev, str(dtype).split(".")[1])
    except dlfuse.Error:
        pytest.skip(f"no {dtype} kernel on {dev}")
    a = torch.randn(24, 16, device=dev).to(dtype)
    b = torch.randn(16, 8, device=dev).to(dtype)
    bias = torch.randn(8, device=dev).to(dtype)
    out = dlfuse.matmul_add_relu(a, b, bias)
    assert out.dtype == dtype
    ref, scale = mar_ref(a, b, bias)
    close(out, ref, dtype, scale=scale)


def test_autograd_matmul_add_relu(dev):
    a = torch.randn(3, 10, 6, device=dev, requires_grad=True)
    b = torch.randn(6, 5, device=dev, requires_grad=True)
    bias = torch.randn(1, 5, device=dev, requires_grad=True)
    out = dft.matmul_add_relu(a, b, bias)
    g = torch.randn_like(out)
    out.backward(g)
    got = [t.grad.clone() for t in (a, b, bias)]
    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    torch.relu(a64 @ b64 + bias64).backward(g.double())
    for x, r in zip(got, (a64, b64, bias64)):
        assert x.shape == r.shape
        close(x, r.grad, scale=torch.full_like(r.grad, 10.0))


@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "silu", "sigmoid"])
def test_autograd_add_mul_activation(dev, act):
    x = torch.randn(9, 7, device=dev, requires_grad=True)
    y = torch.randn(9, 7, device=dev, requires_grad=True)
    bias = torch.randn(7, device=dev, requires_grad=True)
    out = dft.add_mul_activation(x, y, bias, 0.3, act)
    g = torch.randn_like(out)
    out.backward(g)
    got = [t.grad.clone() for t in (x, y, bias)]
    torch_act = {"relu": torch.relu, "silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid,
                 "gelu_tanh": lambda p: torch.nn.functional.gelu(p, approximate="tanh")}[act]
    x64, y64, b64 = (t.detach().double().requires_grad_() for t in (x, y, bias))
    ref = torch_act(x64 + b64 + 0.3 * y64)
    close(out, ref)
    ref.backward(g.double())
    for v, r in zip(got, (x64, y64, b64)):
        close(v, r.grad, scale=torch.full_like(r.grad, 10.0))


def test_only_needed_grads(dev):
    a = torch.randn(6, 4, device=dev)                 # data: no grad
    b = torch.randn(4, 3, device=dev, requires_grad=True)
    bias = torch.randn(3, device=dev, requires_grad=True)
    dft.matmul_add_relu(a, b, bias).sum().backward()
    assert a.grad is None and b.grad is not None and bias.grad is not None


def test_saved_tensors_live_until_the_backward(dev):
    """The node keeps what the backward reads for one backward (two with retain_graph); a
    second backward through a freed graph is refused by autograd, not run on freed data."""
    x = torch.randn(5, 7, device=dev, requires_grad=True)
    y = torch.randn(5, 7, device=dev)
    bias = torch.randn(7, device=dev)
    out = dft.add_mul_activation(x, y, bias, 0.5, "tanh")
    out.sum().backward(retain_graph=True)
    first = x.grad.clone()
    out.sum().backward()
    close(x.grad, 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        out.sum().backward()


def test_parameters_take_the_eager_path(dev, monkeypatch):
    """A layer's weight and bias are nn.Parameters: a training step must not go through the
    dispatcher's Python layers (which cost more than the kernel on small tensors): the
    function calls the operator's autograd kernel directly, a C++ node with the C++
    operators."""
    lin = torch.nn.Linear(4, 3).to(dev)
    x = torch.randn(6, 4, device=dev, requires_grad=True)
    called = []
    f = dft.op_function("matmul_add_relu")
    real = torch.ops.dlfuse.matmul_add_relu
    monkeypatch.setattr(torch.ops.dlfuse, "matmul_add_relu", lambda *a: called.append(1) or real(*a))
    out = f(x, lin.weight.t(), lin.bias)
    assert not called
    if dft.CPP_OPS:
        assert out.grad_fn.name() == "dlfuse::matmul_add_reluBackward", out.grad_fn.name()
    out.sum().backward()
    assert lin.weight.grad is not None and lin.bias.grad is not None
    close(out, torch.relu(x @ lin.weight.t() + lin.bias))


def test_cpp_operators_in_use():
    """Where the build made the C++ operators for this torch (DLFUSE_REQUIRE_TORCH_OPS=cpp,
    set by the GPU job and CI), dlfuse.torch uses them; DLFUSE_TORCH_OPS=python turns them off."""
    from dlfuse import _torch_cpp
    if os.environ.get("DLFUSE_TORCH_OPS") == "python":
        assert not dft.CPP_OPS and _torch_cpp.why_not == "DLFUSE_TORCH_OPS=python"
    elif os.environ.get("DLFUSE_REQUIRE_TORCH_OPS") == "cpp":
        assert dft.CPP_OPS, _torch_cpp.why_not
    else:
        assert dft.CPP_OPS or _torch_cpp.why_not


def test_opcheck(dev):
    a = torch.randn(5, 4, device=dev, requires_grad=True)
    b = torch.randn(4, 3, device=dev, requires_grad=True)
    bias = torch.randn(3, device=dev, requires_grad=True)
    torch.library.opcheck(torch.ops.dlfuse.matmul_add_relu.default, (a, b, bias, 0))
    x = torch.randn(5, 3, device=dev, requires_grad=True)
    torch.library.opcheck(torch.ops.dlfuse.add_mul_activation.default, (x, x.detach().clone(), bias, 6, 0.5))


def test_eager_backward_in_operand_layout(dev):
    """The eager backward allocates each gradient grad_<x> in x's layout where x is dense
    (weight.t(): the weight's, which autograd accumulates into .grad without a copy): the same
    values as the contiguous layout."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(6, 4, generator=gen).to(dev).requires_grad_()
    w = torch.randn(3, 4, generator=gen).to(dev).requires_grad_()
    bias = torch.randn(3, generator=gen).to(dev)
    seen = []
    h = w.register_hook(lambda grad: seen.append(grad.stride()))
    out = dft.matmul_add_relu(a, w.t(), bias)
    g = torch.randn(6, 3, generator=gen).to(dev)
    out.backward(g)
    h.remove()
    assert seen == [w.stride()], seen
    torch.testing.assert_close(w.grad, ((g * (out > 0)).t() @ a).detach(), rtol=1e-5, atol=1e-5)


def test_matmul_backward_transposed(dev):
    """transposed=[False, True, False]: grad_b as the transpose of a contiguous tensor whatever
    b's strides (the traced backward's layout for weight.t(), fixed at trace time), the same
    values; the fake kernel agrees (opcheck). Every derived backward has the argument."""
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(6, 4, generator=gen).to(dev)
    bias = torch.randn(3, generator=gen).to(dev)
    g = torch.randn(6, 3, generator=gen).to(dev)
    ops = torch.ops.dlfuse
    flags = [False, True, False]
    for b in (torch.randn(3, 4, generator=gen).to(dev).t(), torch.randn(4, 3, generator=gen).to(dev)):
        out = dft.matmul_add_relu(a, b, bias)
        ga, gb, gc = ops.matmul_add_relu_backward.default(g, a, b, out, 0, [], flags, [3])
        ga0, gb0, gc0 = ops.matmul_add_relu_backward.default(g, a, b, out, bias_shape=[3])
        assert gb.t().is_contiguous() and not gb.is_contiguous() and gb0.is_contiguous()
        for x, y in ((ga, ga0), (gb, gb0), (gc, gc0)):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        torch.library.opcheck(ops.matmul_add_relu_backward.default, (g, a, b, out, 0, [], flags, [3]),
                              test_utils=("test_schema", "test_faketensor"))
        saved = dft.matmul_add_activation(a, b, bias, "relu")
        gs = ops.matmul_add_activation_backward.default(g, a, b, saved, None, 1, 0, [], flags, [3])
        assert gs[1].t().is_contiguous() and not gs[1].is_contiguous()
        torch.testing.assert_close(gs[1], gb0, rtol=0, atol=0)
        gs = ops.matmul_add_residual_backward.default(g, a, b, 0, [], flags + [False], [3], [6, 3])
        assert gs[1].t().is_contiguous() and not gs[1].is_contiguous()
        torch.testing.assert_close(gs[1], a.t() @ g, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["relu", "activation", "residual"])
def test_compiled_weight_grad_in_weight_layout(dev, op):
    """Compiled and eager, the gradient of `x @ weight.t()` reaches the weight (a leaf hook
    sees it before autograd accumulates it) in the weight's own layout, so no copy kernel
    runs per layer and step; and the two agree."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(8, 5).to(dev)
    res = torch.randn(7, 5, device=dev)
    fn = {"relu": lambda x: dft.matmul_add_relu(x, lin.weight.t(), lin.bias),
          "activation": lambda x: dft.matmul_add_activation(x, lin.weight.t(), lin.bias, "gelu"),
          "residual": lambda x: dft.matmul_add_residual(x, lin.weight.t(), lin.bias, res)}[op]
    seen = []
    h = lin.weight.register_hook(lambda grad: seen.append(grad.stride()))
    try:
        x = torch.randn(7, 8, device=dev)
        torch.compile(fn, fullgraph=True)(x).square().sum().backward()
        compiled = lin.weight.grad.clone()
        lin.weight.grad = None
        fn(x).square().sum().backward()
    finally:
        h.remove()
    assert seen == [lin.weight.stride()] * 2, seen
    torch.testing.assert_close(compiled, lin.weight.grad, rtol=1e-5, atol=1e-6)


def test_torch_compile_fullgraph(dev):
    lin1 = torch.nn.Linear(16, 32).to(dev)
    lin2 = torch.nn.Linear(32, 8).to(dev)
    bint = torch.randn(32, device=dev, requires_grad=True)

    def f(x):
        h = dft.matmul_add_relu(x, lin1.weight.t(), lin1.bias)
        h = dft.add_mul_activation(h, h * 2, bint, 0.25, "tanh")
        return dft.matmul_add_relu(h, lin2.weight.t(), lin2.bias).square().mean()

    def ref(x):
        h = torch.relu(x @ lin1.weight.t() + lin1.bias)
        h = torch.tanh(h + bint + 0.25 * (h * 2))
        return torch.relu(h @ lin2.weight.t() + lin2.bias).square().mean()

    x = torch.randn(12, 16, device=dev)
    cf = torch.compile(f, fullgraph=True)
    params = [lin1.weight, lin1.bias, lin2.weight, lin2.bias, bint]
    got = cf(x)
    grads = torch.autograd.grad(got, params)
    want = ref(x)
    wgrads = torch.autograd.grad(want, params)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_cuda_stream_protocol():
    if not (_cuda_ok() or REQUIRE_CUDA):
        pytest.skip("no CUDA GPU/plugin")
    assert _cuda_ok()
    s = torch.cuda.Stream()
    a = torch.randn(256, 128, device="cuda")
    b = torch.randn(128, 64, device="cuda")
    bias = torch.randn(64, device="cuda")
    ref, scale = mar_ref(a, b, bias)
    torch.cuda.synchronize()
    from dlfuse import _ext
    if _ext.exchange_api(torch.Tensor) is not None:
        with torch.cuda.stream(s):   # calls without stream= run on torch's current stream
            assert _ext.current_stream(a) == s.cuda_stream
        assert _ext.current_stream(a) == torch.cuda.current_stream().cuda_stream
    with torch.cuda.stream(s):
        out = torch.empty(256, 64, device="cuda")
        # the ops run on s; the torch.library op takes torch's current stream
        dlfuse.matmul_add_relu(a, b, bias, out=out, stream=s)
        out2 = dft.matmul_add_relu(a, b, bias)
    s.synchronize()
    close(out, ref, scale=scale)
    close(out2, ref, scale=scale)
    out3 = dlfuse.matmul_add_relu(a, b, bias, stream=s.cuda_stream)
    s.synchronize()
    close(out3, ref, scale=scale)
    # the legacy default stream, spelled as torch does (0) and as DLPack does (1)
    for st in (0, 1, torch.cuda.default_stream()):
        close(dlfuse.matmul_add_relu(a, b, bias, stream=st), ref, scale=scale)


def test_dlrm_short_run(dev):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import dlrm_mlp
    assert dlrm_mlp.main(["--device", dev, "--steps", "12", "--batch", "32"]) == 0
