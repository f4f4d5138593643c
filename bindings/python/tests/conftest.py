"""Shared fixtures. The suite finds libdlfuse through $DLFUSE_LIBRARY (ctest sets it to the
build's library, whose plugin folder is discovered next to it). A missing library is an
error, not a skip: a suite that silently tests nothing proves nothing."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if os.environ.get("DLFUSE_TEST_INSTALLED") != "1" and SRC not in sys.path:
    sys.path.insert(0, SRC)

import dlfuse  # noqa: E402

POISON = 1234.5  # finite, so an unwritten element cannot pass as a NaN result
# On the GPU machine: CUDA cases fail instead of skipping when no GPU or CUDA plugin is there.
REQUIRE_CUDA = os.environ.get("DLFUSE_REQUIRE_CUDA") == "1"


def cuda_plugin_available():
    return any(p.available and p.device == "cuda" for p in dlfuse.plugins())


def cpu_plugin_for(dtype):
    try:
        return dlfuse.registry().resolve("matmul_add_relu", "cpu", dtype)
    except dlfuse.Error:
        return None


@pytest.fixture(scope="session")
def cpu_f32():
    name = cpu_plugin_for("float32")
    if name is None:
        pytest.skip("no CPU plugin serves float32 in this build: " + repr(dlfuse.plugins()))
    return name


@pytest.fixture
def rng(request):
    # fresh data per test, reproducible per test name
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def tol(dtype):
    """(rtol, atol) of docs/ops.md, applied with numpy's allclose against float64."""
    return {np.float32: (2e-5, 1e-5), np.float16: (4e-3, 1e-3),
            np.float64: (1e-12, 1e-300)}[np.dtype(dtype).type]


def assert_close_sum(got, ref, scale, dtype):
    """|got - ref| <= atol + rtol * scale elementwise (scale = sum of |terms|)."""
    rtol, atol = tol(dtype)
    got = np.asarray(got, dtype=np.float64)
    bad = np.abs(got - ref) > atol + rtol * np.maximum(scale, np.abs(ref))
    bad |= np.isnan(got) != np.isnan(ref)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} elements off; first at "
                           f"{np.argwhere(bad)[0]}: got {got[bad][0]}, ref {ref[bad][0]}")
