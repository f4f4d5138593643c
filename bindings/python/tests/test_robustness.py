"""Bad input never crashes and nothing leaks: non-tensors, producers whose __dlpack__ raises
or returns the wrong thing, consumed capsules, unsupported DLPack versions, read-only and
negative-stride arrays, wrong devices; 100k calls with flat memory and reference counts.
Run under ASan+UBSan by the asan preset (ctest -L python)."""
import ctypes
import gc
import os
import sys
import tracemalloc

import numpy as np
import pytest

import dlfuse

pytestmark = pytest.mark.usefixtures("cpu_f32")

A = np.ones((4, 3), np.float32)
B = np.zeros(3, np.float32)


class Producer:
    """Hands out whatever `make` returns from __dlpack__."""

    def __init__(self, make, device=(1, 0)):
        self.make, self.device = make, device

    def __dlpack__(self, **kw):
        return self.make()

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize("bad", [None, 3, "x", [[1.0, 2.0]], object(), np.float32(1.0).item()])
def test_non_tensors(bad):
    with pytest.raises(TypeError, match="'x' must support the DLPack protocol"):
        dlfuse.add_mul_activation(bad, A, B)
    with pytest.raises(TypeError, match="'bias' must support the DLPack protocol"):
        dlfuse.matmul_add_relu(A, A.T, bad)


def test_dlpack_raises_propagates():
    def boom():
        raise RuntimeError("producer exploded")
    with pytest.raises(RuntimeError, match="producer exploded"):
        dlfuse.add_mul_activation(A, Producer(boom), B)


@pytest.mark.parametrize("ret", [None, 7, "dltensor", b"x"])
def test_dlpack_returns_non_capsule(ret):
    with pytest.raises(TypeError, match="not an unconsumed 'dltensor'"):
        dlfuse.add_mul_activation(A, Producer(lambda: ret), B)


def test_capsule_with_other_name():
    PyCapsule_New = ctypes.pythonapi.PyCapsule_New
    PyCapsule_New.restype = ctypes.py_object
    PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    buf = ctypes.create_string_buffer(64)
    cap = PyCapsule_New(ctypes.addressof(buf), b"not_dltensor", None)
    with pytest.raises(TypeError, match="not an unconsumed"):
        dlfuse.add_mul_activation(A, Producer(lambda: cap), B)


def test_capsule_consumed_twice():
    arr = np.ones((4, 3), np.float32)
    for versioned in (True, False):
        cap = arr.__dlpack__(max_version=(1, 0)) if versioned else arr.__dlpack__()
        p = Producer(lambda: cap)
        out = dlfuse.add_mul_activation(A, p, B, 1.0, "identity")   # consumes it
        np.testing.assert_array_equal(out, np.full((4, 3), 2.0, np.float32))
        with pytest.raises(TypeError, match="not an unconsumed"):
            dlfuse.add_mul_activation(A, p, B)                        # the same capsule again
        del cap, p
    gc.collect()
    assert sys.getrefcount(arr) == 2  # the deleter ran once per capsule


def test_unsupported_major_version():
    arr = np.ones((4, 3), np.float32)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]

    def make():
        cap = arr.__dlpack__(max_version=(1, 0))
        ctypes.c_uint32.from_address(get(cap, b"dltensor_versioned")).value = 2  # version.major
        return cap
    with pytest.raises(BufferError, match="major version 2"):
        dlfuse.add_mul_activation(A, Producer(make), B)
    gc.collect()
    assert sys.getrefcount(arr) == 2  # refused capsules are freed by their own destructor


def test_bad_dlpack_device():
    with pytest.raises(TypeError, match="__dlpack_device__"):
        dlfuse.add_mul_activation(A, Producer(lambda: A.__dlpack__(), device="cpu"), B)


def test_wrong_device_claims():
    # Claims CUDA, so it is asked for a stream; NumPy refuses to export to one.
    p = Producer(lambda: A.__dlpack__(stream=1), device=(2, 0))
    with pytest.raises(Exception) as ei:
        dlfuse.add_mul_activation(A, p, B)
    assert not isinstance(ei.value, SystemError)


def test_read_only_and_negative_strides():
    ro = np.broadcast_to(B, (4, 3))
    with pytest.raises(dlfuse.InvalidArgumentError, match="out: expected a writable tensor"):
        dlfuse.add_mul_activation(A, A, B, out=ro)
    x = A.copy()
    x.flags.writeable = False
    with pytest.raises(dlfuse.InvalidArgumentError, match="read-only"):
        dlfuse.add_mul_activation(x, A, B, out=x)
    with pytest.raises(dlfuse.InvalidArgumentError, match="strides"):
        dlfuse.add_mul_activation(A[::-1], A, B)
    with pytest.raises(dlfuse.InvalidArgumentError, match="read-only"):
        dlfuse.matmul_add_relu_backward(A, A, A.T.copy(), A, grad_a=ro)


def test_bad_keywords_and_arity():
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        dlfuse.add_mul_activation(A, A, B, nope=1)
    with pytest.raises(TypeError, match="missing required argument 'bias'"):
        dlfuse.add_mul_activation(A, A)
    with pytest.raises(TypeError, match="multiple values"):
        dlfuse.add_mul_activation(A, A, B, x=A)
    with pytest.raises(TypeError, match="at most"):
        dlfuse.matmul_add_relu(A, A.T, B, None, None, False, None, 1)
    with pytest.raises(TypeError, match="stream must be"):
        dlfuse.add_mul_activation(A, A, B, stream="s")
    with pytest.raises(ValueError, match="needs"):
        dlfuse.add_mul_activation_backward(A, A, A, B, needs=(True,))
    with pytest.raises(TypeError):
        dlfuse.matmul_add_relu_backward(A, A, A.T.copy(), A, bias_shape=5)


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _leak_check(fn, n):
    """n calls: reference counts of the inputs unchanged, resident memory flat; then Python
    allocations traced over a tenth of them (tracemalloc is slow)."""
    for _ in range(500):
        fn()
    gc.collect()
    refs = [sys.getrefcount(t) for t in (A, B)]
    rss = _rss()
    for _ in range(n):
        fn()
    gc.collect()
    assert [sys.getrefcount(t) for t in (A, B)] == refs
    grown = _rss() - rss
    # (ASan's quarantine holds freed memory back on purpose: resident size means nothing)
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        assert grown < 4 << 20, f"resident memory grew {grown} bytes over {n} calls"
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(n // 10):
        fn()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more after {n // 10} calls"


def test_no_leaks_100k_calls():
    out = np.empty_like(A)
    x = np.ones((3, 4), np.float32)

    def calls():
        dlfuse.add_mul_activation(A, A, B, 0.5, "silu", out=out)
        dlfuse.add_mul_activation(A, A, B)                        # allocated output

    _leak_check(calls, 50_000)
    # the matmul path too (oneDNN's threads make it slower on a loaded machine: fewer calls)
    g = np.ones((4, 4), np.float32)
    _leak_check(lambda: dlfuse.matmul_add_relu_backward(g, A, x, g), 5_000)


def test_no_leaks_on_errors():
    half = A.astype(np.float16)

    def calls():
        for bad in ((A, half, B), (A, A[::-1], B), (A, 3, B)):
            try:
                dlfuse.add_mul_activation(*bad)
            except (dlfuse.Error, TypeError):
                pass
    _leak_check(calls, 30_000)
