"""NumPy interop: round trips, strides, zero copy (by pointer), out=, legacy capsules,
errors carrying the C message. References are float64 NumPy."""
import ctypes
import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import dlfuse
from dlfuse import _core
from conftest import POISON, assert_close_sum, cpu_plugin_for

_capsule_is = ctypes.pythonapi.PyCapsule_IsValid  # (capsule, name): 1 when the name matches
_capsule_is.restype = ctypes.c_int
_capsule_is.argtypes = [ctypes.py_object, ctypes.c_char_p]

pytestmark = pytest.mark.usefixtures("cpu_f32")


def ptr(x):
    return np.from_dlpack(x).ctypes.data if not isinstance(x, np.ndarray) else x.ctypes.data


# ---- float64 references (docs/ops.md) --------------------------------------------------------

def ref_mar(a, b, bias):
    a, b, bias = (np.asarray(t, np.float64) for t in (a, b, bias))
    z = np.matmul(a, b) + bias
    scale = np.matmul(np.abs(a), np.abs(b)) + np.abs(bias)
    return np.where(np.isnan(z) | (z > 0), z, 0.0), scale


def reduce_to(g, shape):
    while g.ndim > len(shape):
        g = g.sum(0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdims=True)
    return g


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


ACTS = {
    "identity": (lambda p: p, lambda p: np.ones_like(p)),
    "relu": (lambda p: np.where(np.isnan(p) | (p > 0), p, 0.0),
             lambda p: np.where(np.isnan(p) | (p > 0), 1.0, 0.0)),
    "sigmoid": (lambda p: 1 / (1 + np.exp(-p)),
                lambda p: (1 / (1 + np.exp(-p))) * (1 - 1 / (1 + np.exp(-p)))),
    "tanh": (np.tanh, lambda p: 1 - np.tanh(p) ** 2),
    "gelu_erf": (lambda p: 0.5 * p * (1 + _erf(p / np.sqrt(2))),
                 lambda p: 0.5 * (1 + _erf(p / np.sqrt(2))) + p * np.exp(-p * p / 2) / np.sqrt(2 * np.pi)),
    "silu": (lambda p: p / (1 + np.exp(-p)),
             lambda p: (1 / (1 + np.exp(-p))) * (1 + p * (1 - 1 / (1 + np.exp(-p))))),
}


# ---- discovery, registry ---------------------------------------------------------------------

def test_plugins_listed_and_library_found():
    ps = dlfuse.plugins()
    assert any(p.available and p.device == "cpu" for p in ps), ps
    for p in ps:
        assert isinstance(p, dlfuse.PluginInfo) and p.path
        assert p.available == (p.reason == "")
    assert dlfuse.abi_version()[0] == 1
    assert dlfuse.library_path()


def test_load_plugin_failure_carries_c_message(tmp_path):
    bogus = tmp_path / "libdlfuse_bogus.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(dlfuse.LoadFailedError) as ei:
        dlfuse.load_plugin(str(bogus))
    assert ei.value.status == 5 and ei.value.status_name == "LOAD_FAILED"
    assert str(bogus) in ei.value.message
    assert ei.value.message == dlfuse.last_error()
    listed = [p for p in dlfuse.plugins() if p.path == str(bogus)]
    assert listed and not listed[0].available and listed[0].reason


def test_load_plugin_again_returns_first_index():
    p0 = next(p for p in dlfuse.plugins() if p.available and p.device == "cpu")
    again = dlfuse.load_plugin(p0.path)
    assert again.index == p0.index and again.name == p0.name


def test_private_registry_without_discovery_has_no_plugins():
    r = dlfuse.Registry(discovery=0)
    assert r.plugins() == []
    a = np.ones((2, 2), np.float32)
    with pytest.raises(dlfuse.UnsupportedError, match="no available plugin"):
        dlfuse.matmul_add_relu(a, a, a[0], registry=r)
    r.close()


# ---- matmul_add_relu ---------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb,sbias", [
    ((33, 17), (17, 9), (9,)),
    ((8, 5), (5, 6), (1, 6)),
    ((8, 5), (5, 6), (8, 1)),
    ((8, 5), (5, 6), (8, 6)),
    ((2, 1, 7, 4), (3, 4, 5), (5,)),          # batch broadcast
    ((4, 0), (0, 3), (3,)),                   # K = 0 -> relu(bias)
])
def test_matmul_add_relu_forward(rng, sa, sb, sbias):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    bias = rng.standard_normal(sbias).astype(np.float32)
    out = dlfuse.matmul_add_relu(a, b, bias)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    ref, scale = ref_mar(a, b, bias)
    assert out.shape == ref.shape
    assert_close_sum(out, ref, scale, np.float32)


def test_out_is_written_in_place_and_returned(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    out = np.full((16, 4), POISON, np.float32)
    p = out.ctypes.data
    res = dlfuse.matmul_add_relu(a, b, bias, out=out)
    assert res is out and out.ctypes.data == p
    ref, scale = ref_mar(a, b, bias)
    assert_close_sum(out, ref, scale, np.float32)


def test_result_is_zero_copy_for_consumers(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    out = dlfuse.matmul_add_relu(a, a.T, np.zeros(4, np.float32))
    view = np.from_dlpack(out)
    assert view.ctypes.data == out.ctypes.data
    view[0, 0] = -7.0
    assert out[0, 0] == -7.0


def test_strided_inputs_and_output(rng):
    big_a = rng.standard_normal((10, 12)).astype(np.float32)
    big_b = rng.standard_normal((9, 8)).astype(np.float32)
    a = big_a[::2, 1::2]          # [5, 6], both strides non-unit
    b = big_b[:6, :].T.T          # [6, 8] view
    bt = big_b[:8, :6].T          # [6, 8] transposed view
    bias = rng.standard_normal(8).astype(np.float32)
    out_store = np.full((8, 5), POISON, np.float32)
    out = out_store.T             # a transposed output
    for bb in (b, bt):
        res = dlfuse.matmul_add_relu(a, bb, bias, out=out)
        assert res is out
        ref, scale = ref_mar(a, bb, bias)
        assert_close_sum(out, ref, scale, np.float32)


def test_matmul_add_relu_backward(rng):
    a = rng.standard_normal((2, 9, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    bias = rng.standard_normal((1, 7)).astype(np.float32)
    out = dlfuse.matmul_add_relu(a, b, bias)
    g = rng.standard_normal(out.shape).astype(np.float32)
    ga, gb, gbias = dlfuse.matmul_add_relu_backward(g, a, b, out, bias_shape=(1, 7))
    o64 = out.astype(np.float64)
    dz = np.where((o64 > 0) | np.isnan(o64), g.astype(np.float64), 0.0)
    adz = np.abs(dz)
    assert_close_sum(ga, dz @ b.astype(np.float64).T, adz @ np.abs(b.astype(np.float64)).T, np.float32)
    ref_gb = reduce_to(np.swapaxes(a, -1, -2).astype(np.float64) @ dz, b.shape)
    scale_gb = reduce_to(np.swapaxes(np.abs(a), -1, -2).astype(np.float64) @ adz, b.shape)
    assert_close_sum(gb, ref_gb, scale_gb, np.float32)
    assert gbias.shape == (1, 7)
    assert_close_sum(gbias, reduce_to(dz, (1, 7)), reduce_to(adz, (1, 7)), np.float32)


def test_backward_needs_and_given_outputs(rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    out = dlfuse.matmul_add_relu(a, b, bias)
    g = rng.standard_normal(out.shape).astype(np.float32)
    gb_out = np.full(b.shape, POISON, np.float32)
    ga, gb, gbias = dlfuse.matmul_add_relu_backward(g, a, b, out, needs=(False, True, False),
                                                    grad_b=gb_out)
    assert ga is None and gbias is None and gb is gb_out
    dz = np.where(out > 0, g, 0).astype(np.float64)
    assert_close_sum(gb, a.astype(np.float64).T @ dz, np.abs(a.astype(np.float64)).T @ np.abs(dz), np.float32)


def test_float16(rng):
    if cpu_plugin_for("float16") is None:
        pytest.skip("no CPU float16 kernel")
    a = rng.standard_normal((12, 8)).astype(np.float16)
    b = rng.standard_normal((8, 5)).astype(np.float16)
    bias = rng.standard_normal(5).astype(np.float16)
    out = dlfuse.matmul_add_relu(a, b, bias)
    assert out.dtype == np.float16
    ref, scale = ref_mar(a, b, bias)
    assert_close_sum(out, ref, scale, np.float16)


# ---- add_mul_activation ------------------------------------------------------------------------

@pytest.mark.parametrize("act", sorted(ACTS))
def test_add_mul_activation_forward_backward(rng, act):
    x = rng.standard_normal((7, 6)).astype(np.float32)
    y = rng.standard_normal((7, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    m = -0.75
    f, df = ACTS[act]
    out = dlfuse.add_mul_activation(x, y, bias, m, act)
    pre = x.astype(np.float64) + bias + m * y.astype(np.float64)
    assert_close_sum(out, f(pre), 0.0, np.float32)
    g = rng.standard_normal(out.shape).astype(np.float32)
    gx, gy, gb = dlfuse.add_mul_activation_backward(g, x, y, bias, m, act)
    dpre = g * df(pre)
    assert_close_sum(gx, dpre, 0.0, np.float32)
    assert_close_sum(gy, m * dpre, 0.0, np.float32)
    assert_close_sum(gb, dpre.sum(0), np.abs(dpre).sum(0), np.float32)


def test_add_mul_broadcast_and_nan(rng):
    x = rng.standard_normal((3, 1, 5)).astype(np.float32)
    y = rng.standard_normal((4, 1)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    x[0, 0, 2] = np.nan
    out = dlfuse.add_mul_activation(x, y, bias, 2.0, "relu")
    assert out.shape == (3, 4, 5)
    pre = x.astype(np.float64) + bias + 2.0 * y
    ref = np.where(np.isnan(pre) | (pre > 0), pre, 0.0)
    assert np.isnan(out[0, :, 2]).all()  # relu(NaN) = NaN
    assert_close_sum(out, ref, 0.0, np.float32)


def test_add_mul_in_place(rng):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((5, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    ref = np.tanh(x.astype(np.float64) + bias + 0.5 * y)
    p = x.ctypes.data
    res = dlfuse.add_mul_activation(x, y, bias, 0.5, "tanh", out=x)
    assert res is x and x.ctypes.data == p
    assert_close_sum(x, ref, 0.0, np.float32)


# ---- DLPack: legacy capsules, exports, ownership ---------------------------------------------

class LegacyProducer:
    """A producer from before DLPack 1.0: __dlpack__ takes no max_version."""

    def __init__(self, arr):
        self.arr = arr
        self.calls = 0

    def __dlpack__(self, stream=None):
        self.calls += 1
        return self.arr.__dlpack__()  # NumPy returns a legacy capsule without max_version

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_legacy_capsule_inputs_and_out(rng):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    out = np.full((6, 3), POISON, np.float32)
    la, lout = LegacyProducer(a), LegacyProducer(out)
    cap = la.__dlpack__()
    assert _capsule_is(cap, b"dltensor") == 1
    del cap
    res = dlfuse.matmul_add_relu(la, b, bias, out=lout)
    assert res is lout and la.calls == 2 and lout.calls == 1
    ref, scale = ref_mar(a, b, bias)
    assert_close_sum(out, ref, scale, np.float32)
    # outputs allocated for a non-framework producer on the CPU are NumPy arrays
    res2 = dlfuse.matmul_add_relu(la, b, bias)
    assert isinstance(res2, np.ndarray)
    assert_close_sum(res2, ref, scale, np.float32)


def test_versioned_capsule_requested():
    seen = {}

    class Spy:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            seen.update(kw)
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a = np.ones((2, 2), np.float32)
    dlfuse.add_mul_activation(Spy(a), a, a[0])
    assert seen.get("max_version") == (1, 0)


def test_dlfuse_tensor_export_import_roundtrip(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    t = dlfuse.to_device(x, "cpu")
    assert t.shape == (5, 3) and t.dtype == "float32" and t.device == ("cpu", 0)
    v = np.from_dlpack(t)                   # versioned capsule consumed by NumPy
    assert v.ctypes.data == t.data_ptr()    # zero copy
    np.testing.assert_array_equal(v, x)
    legacy = t.__dlpack__()                 # legacy export
    assert _capsule_is(legacy, b"dltensor") == 1
    versioned = t.__dlpack__(max_version=(1, 3))
    assert _capsule_is(versioned, b"dltensor_versioned") == 1
    n_exports = sys.getrefcount(t)          # each live export holds the Tensor
    del legacy, versioned                   # unconsumed capsules free themselves
    gc.collect()
    assert sys.getrefcount(t) == n_exports - 2
    # a dlfuse.Tensor is a valid input and output of the ops
    out = dlfuse.add_mul_activation(t, t, np.zeros(3, np.float32), 1.0, "identity")
    np.testing.assert_allclose(out, 2 * x, rtol=1e-6)
    # the exported view keeps the memory alive after the Tensor object is gone
    alive = weakref.ref(t)
    del t
    gc.collect()
    assert alive() is not None
    np.testing.assert_array_equal(v, x)
    del v
    gc.collect()
    assert alive() is None


def test_dlfuse_tensor_refuses_other_device_and_copy():
    t = dlfuse.Tensor.empty((2,), "float32", "cpu")
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), copy=True)


# ---- errors: the C message surfaces as a Python exception ----------------------------------

def test_shape_mismatch_error(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError) as ei:
        dlfuse.matmul_add_relu(a, a, np.zeros(3, np.float32))
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, dlfuse.Error)
    assert e.status == 1 and "(K)" in e.message and e.message == dlfuse.last_error()


def test_wrong_out_shape_error(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="out"):
        dlfuse.matmul_add_relu(a, a.T, np.zeros(4, np.float32), out=np.empty((4, 5), np.float32))


def test_mixed_dtype_error():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="dtype is float16; expected float32"):
        dlfuse.add_mul_activation(a, a.astype(np.float16), a[0])


def test_unsupported_dtype_error():
    a = np.ones((2, 2), np.int32)
    with pytest.raises(dlfuse.UnsupportedError) as ei:
        dlfuse.add_mul_activation(a, a, a[0])
    assert "no kernel" in ei.value.message and "available" in ei.value.message


def test_negative_strides_error():
    a = np.ones((3, 2), np.float32)[::-1]
    with pytest.raises(dlfuse.InvalidArgumentError, match="strides"):
        dlfuse.add_mul_activation(a, a, a[0])


def test_partial_overlap_error():
    a = np.ones((3, 2), np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="overlap"):
        dlfuse.add_mul_activation(a[:2], a[:2], a[0], out=a[1:])


def test_read_only_out_error():
    a = np.ones((3, 2), np.float32)
    ro = np.broadcast_to(a[0], (3, 2))
    with pytest.raises(dlfuse.InvalidArgumentError, match="read-only"):
        dlfuse.add_mul_activation(a, a, a[0], out=ro)
    # read-only inputs are fine
    out = dlfuse.add_mul_activation(ro, a, a[0], 1.0, "identity")
    np.testing.assert_array_equal(out, np.full((3, 2), 3.0, np.float32))


def test_bad_activation_errors():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="activation"):
        dlfuse.add_mul_activation(a, a, a[0], activation="swish2")
    with pytest.raises(dlfuse.InvalidArgumentError, match="ACTIVATION is 42"):
        dlfuse.add_mul_activation(a, a, a[0], activation=42)


def test_non_dlpack_input_error():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="'x' must support the DLPack protocol"):
        dlfuse.add_mul_activation([[1.0, 2.0]], a, a[0])


def test_one_d_matmul_error():
    a = np.ones(3, np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="ndim is 1"):
        dlfuse.matmul_add_relu(a, a, a)


# ---- threads ------------------------------------------------------------------------------------

def test_concurrent_calls(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    ref, scale = ref_mar(a, b, bias)
    errors = []

    def work():
        try:
            for _ in range(50):
                out = dlfuse.matmul_add_relu(a, b, bias)
                assert_close_sum(out, ref, scale, np.float32)
            try:
                dlfuse.matmul_add_relu(a, a, bias)
            except dlfuse.InvalidArgumentError as e:
                assert "(K)" in e.message  # the last error is per thread
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


# ---- Device memory of the OpenCL and WebGPU plugins through their device services ---------

@pytest.mark.parametrize("dev", ["opencl", "webgpu"])
def test_device_tensors(rng, dev):
    if not any(p.available and p.device == dev for p in dlfuse.plugins()):
        pytest.skip(f"no {dev} plugin available")
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.standard_normal((6, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    tx, ty, tb = (dlfuse.to_device(v, f"{dev}:0") for v in (x, y, bias))
    out = dlfuse.add_mul_activation(tx, ty, tb, 0.5, "sigmoid")
    assert isinstance(out, dlfuse.Tensor) and out.device == (dev, 0)
    pre = x.astype(np.float64) + bias + 0.5 * y
    assert_close_sum(out.to_numpy(), 1 / (1 + np.exp(-pre)), 0.0, np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b3 = rng.standard_normal(3).astype(np.float32)
    mo = dlfuse.matmul_add_relu(tx, dlfuse.to_device(w, dev), dlfuse.to_device(b3, dev))
    ref, scale = ref_mar(x, w, b3)
    assert_close_sum(mo.to_numpy(), ref, scale, np.float32)
    t = dlfuse.Tensor.empty((2, 3), "float32", f"{dev}:0")
    assert t.device == (dev, 0) and t.shape == (2, 3)
    with pytest.raises(dlfuse.InvalidArgumentError, match="device"):
        dlfuse.add_mul_activation(tx, y, bias)  # mixing device and host memory


def test_refused_export_keeps_the_consumers_error():
    """A consumer that refuses a dlfuse.Tensor's capsule drops it with its own exception
    pending: that exception reaches the caller (it was a SystemError), and the export is
    released."""
    if not any(p.available and p.device == "opencl" for p in dlfuse.plugins()):
        pytest.skip("no OpenCL plugin available")
    t = dlfuse.Tensor.empty((2, 3), "float32", "opencl:0")
    n_exports = sys.getrefcount(t)  # each live export holds the Tensor
    for _ in range(3):
        with pytest.raises(Exception) as e:
            np.from_dlpack(t)  # NumPy takes host memory only
        assert not isinstance(e.value, SystemError), repr(e.value)
    gc.collect()
    assert sys.getrefcount(t) == n_exports


def test_to_numpy_without_a_numpy_dtype(monkeypatch):
    """bfloat16 without ml_dtypes: a clear TypeError, never a wrong-dtype copy."""
    monkeypatch.setattr(_core, "_numpy_dtype", lambda code, bits: None)
    t = dlfuse.Tensor.empty((2, 3), "bfloat16", "cpu")
    with pytest.raises(TypeError, match="bfloat16"):
        t.to_numpy()


# ---- the checks catch a wrong kernel -------------------------------------------------------

def test_checks_catch_a_wrong_plugin(rng):
    """The build's deliberately wrong test plugin (grad_y misses the multiplier) must fail
    this file's reference check: proof that the checks above can fail."""
    import os
    d = os.environ.get("DLFUSE_TEST_PLUGIN_DIR", "")
    path = os.path.abspath(os.path.join(d, "libdlfuse_testref_wrong.so"))
    if not d or not os.path.exists(path):
        pytest.skip("the wrong test plugin is not built here")
    r = dlfuse.Registry(plugin_paths=[path], discovery=0)
    assert [(p.name, p.available) for p in r.plugins()] == [("testref_wrong", True)]
    x, y = (rng.standard_normal((4, 3)) for _ in range(2))
    bias = rng.standard_normal(3)
    g = rng.standard_normal((4, 3))
    m = 0.5
    gx, gy, gb = dlfuse.add_mul_activation_backward(g, x, y, bias, m, "identity", registry=r)
    assert_close_sum(gx, g, 0.0, np.float64)
    with pytest.raises(AssertionError):
        assert_close_sum(gy, m * g, 0.0, np.float64)
    r.close()


# ---- library lookup, preferences ------------------------------------------------------------

def test_missing_library_is_a_lazy_clear_error(tmp_path):
    import subprocess
    import sys
    code = ("import dlfuse\n"
            "try:\n    dlfuse.plugins()\n"
            "except dlfuse.LibraryNotFound as e:\n    print('LNF', e)\n")
    env = {k: v for k, v in __import__("os").environ.items()}
    env["DLFUSE_LIBRARY"] = str(tmp_path / "nope" / "libdlfuse.so")
    env["PYTHONPATH"] = __import__("os").path.dirname(dlfuse.__path__[0])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("LNF") and "DLFUSE_LIBRARY" in r.stdout
    assert str(tmp_path / "nope" / "libdlfuse.so") in r.stdout


def test_prefer_and_resolve(cpu_f32):
    reg = dlfuse.Registry()
    names = [p.name for p in reg.plugins() if p.available and p.device == "cpu"]
    assert reg.resolve("matmul_add_relu", "cpu", "float32") == cpu_f32
    last = names[-1]
    reg.prefer(last)
    assert reg.resolve("matmul_add_relu", "cpu", "float32") == last
    with pytest.raises(dlfuse.Error):
        reg.prefer("no_such_plugin_xyz")
    reg.prefer(None)
    assert reg.resolve("matmul_add_relu", "cpu", "float32") == cpu_f32
    reg.close()


def test_registry_close_refuses_live_tensors():
    r = dlfuse.Registry()
    t = dlfuse.Tensor.empty((3,), "float32", "cpu", registry=r)
    with pytest.raises(dlfuse.InvalidArgumentError, match="still alive"):
        r.close()
    del t
    gc.collect()
    r.close()
    r.close()  # twice is fine
