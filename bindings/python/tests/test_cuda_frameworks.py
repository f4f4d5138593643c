"""CuPy and JAX on CUDA (run on the GPU machine; skipped where they or a GPU are absent, or
failing instead when DLFUSE_REQUIRE_CUDA=1)."""

import numpy as np
import pytest

import dlfuse
from conftest import REQUIRE_CUDA, cuda_plugin_available as _cuda_plugin


def _need(modname):
    if REQUIRE_CUDA:
        mod = __import__(modname)
    else:
        mod = pytest.importorskip(modname)
        if not _cuda_plugin():
            pytest.skip("no available CUDA plugin")
    assert _cuda_plugin(), dlfuse.plugins()
    return mod


def ref_mar(a, b, bias):
    z = a.astype(np.float64) @ b.astype(np.float64) + bias
    return np.maximum(z, 0), np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(bias)


def check(got, ref, scale, rtol=2e-5, atol=1e-5):
    got = np.asarray(got, np.float64)
    assert np.all(np.abs(got - ref) <= atol + rtol * np.maximum(scale, np.abs(ref)))


def test_cupy_roundtrip_zero_copy_and_stream():
    cp = _need("cupy")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 16), np.float32)
    bias = rng.standard_normal(16, np.float32)
    ca, cb, cbias = cp.asarray(a), cp.asarray(b), cp.asarray(bias)
    out = dlfuse.matmul_add_relu(ca, cb, cbias)
    assert isinstance(out, cp.ndarray)
    ref, scale = ref_mar(a, b, bias)
    check(cp.asnumpy(out), ref, scale)
    assert cp.from_dlpack(out).data.ptr == out.data.ptr
    s = cp.cuda.Stream(non_blocking=True)
    given = cp.full((64, 16), 1234.5, cp.float32)
    with s:
        res = dlfuse.matmul_add_relu(ca, cb, cbias, out=given, stream=s)
    s.synchronize()
    assert res is given
    check(cp.asnumpy(given), ref, scale)
    # backward + add_mul
    g = cp.asarray(rng.standard_normal((64, 16), np.float32))
    ga, gb, gbias = dlfuse.matmul_add_relu_backward(g, ca, cb, out)
    dz = np.where(cp.asnumpy(out) > 0, cp.asnumpy(g), 0).astype(np.float64)
    check(cp.asnumpy(ga), dz @ b.T, np.abs(dz) @ np.abs(b).T)
    check(cp.asnumpy(gbias), dz.sum(0), np.abs(dz).sum(0))
    x = cp.asarray(rng.standard_normal((64, 16), np.float32))
    o = dlfuse.add_mul_activation(x, g, cbias, 0.5, "gelu_tanh")
    pre = cp.asnumpy(x).astype(np.float64) + bias + 0.5 * cp.asnumpy(g)
    u = np.sqrt(2 / np.pi) * (pre + 0.044715 * pre ** 3)
    check(cp.asnumpy(o), 0.5 * pre * (1 + np.tanh(u)), 0.0)
    with pytest.raises(dlfuse.InvalidArgumentError, match="device"):
        dlfuse.add_mul_activation(x, cp.asnumpy(g), cbias)   # CUDA and host memory mixed


def test_jax_inputs_give_exportable_device_tensor():
    jax = _need("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        if REQUIRE_CUDA:
            pytest.fail(f"jax sees no GPU: {jax.devices()}")
        pytest.skip("jax has no GPU")
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((8, 4), np.float32), rng.standard_normal((8, 4), np.float32)
    bias = rng.standard_normal(4, np.float32)
    gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
    jx, jy, jb = (jax.device_put(v, gpu) for v in (x, y, bias))
    out = dlfuse.add_mul_activation(jx, jy, jb, 2.0, "identity")
    from dlfuse import _ext
    if _ext.exchange_api(type(jx)) is not None:
        # a JAX with the DLPack exchange API allocates the output itself (a fresh array)
        assert type(out) is type(jx)
        check(np.asarray(out), x.astype(np.float64) + bias + 2.0 * y, 0.0)
        return
    # JAX arrays are immutable: the output comes from the CUDA plugin's device services
    assert isinstance(out, dlfuse.Tensor) and out.device == ("cuda", gpu.id)
    check(out.to_numpy(), x.astype(np.float64) + bias + 2.0 * y, 0.0)
    back = jax.dlpack.from_dlpack(out)
    np.testing.assert_allclose(np.asarray(back), out.to_numpy())


def test_dlfuse_tensor_on_cuda_to_torch_zero_copy():
    _need("cupy")
    torch = pytest.importorskip("torch")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dlfuse.to_device(x, "cuda:0")
    tt = torch.from_dlpack(t)
    assert tt.data_ptr() == t.data_ptr() and tt.device.type == "cuda"
    np.testing.assert_array_equal(tt.cpu().numpy(), x)
