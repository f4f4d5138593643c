"""Adding an op touches no binding: an op that only a plugin knows (testref_ops's
testref_scale_add and its backward, tests/plugins/testref/extra_op.cpp) is called through
the functions the package derives from its schema, with float64 references."""
import os

import numpy as np
import pytest

import dlfuse

PLUGIN = os.path.join(os.environ.get("DLFUSE_TEST_PLUGIN_DIR", ""), "libdlfuse_testref_ops.so")


@pytest.fixture(scope="module")
def reg():
    if not os.path.exists(PLUGIN):
        pytest.skip(f"{PLUGIN} not built (DLFUSE_TEST_PLUGIN_DIR)")
    r = dlfuse.Registry(plugin_paths=[PLUGIN], discovery=0)
    assert "testref_scale_add" in dlfuse.op_names(r)
    return r


def test_forward_through_its_derived_function(reg):
    f = dlfuse.op_function("testref_scale_add")
    params = {name: (kind, positional) for name, kind, positional, _req in f.parameters(reg)}
    assert params["x"] == ("input", True) and params["y"] == ("input", True)
    assert params["scale"] == ("attribute", True) and params["out"] == ("output", False)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((3, 4)).astype(dtype)
        y = rng.standard_normal(4).astype(dtype)
        out = f(x, y, 2.5, registry=reg)                       # allocated with the inferred shape
        assert out.shape == (3, 4) and out.dtype == dtype
        np.testing.assert_allclose(out, x.astype(np.float64) + 2.5 * y, rtol=1e-6)
        np.testing.assert_allclose(f(x, y, registry=reg), x + y, rtol=1e-6)  # SCALE's default
        f(x, y, scale=-1.0, out=x, registry=reg)               # in place: out may be x
        np.testing.assert_allclose(x, out - 3.5 * y, rtol=1e-5, atol=1e-6)


def test_backward_gets_needs_and_shapes_from_the_schema(reg):
    g = dlfuse.op_function("testref_scale_add_backward")
    names = [p[0] for p in g.parameters(reg)]
    assert {"grad_out", "scale", "grad_x", "grad_y", "needs", "x_shape", "y_shape"} <= set(names)
    rng = np.random.default_rng(1)
    grad = rng.standard_normal((3, 4))
    gx, gy = g(grad, 2.0, x_shape=(3, 1), y_shape=(4,), registry=reg)
    np.testing.assert_allclose(gx, grad.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(gy, 2.0 * grad.sum(axis=0), rtol=1e-12)
    gx, gy = g(grad, needs=(True, False), registry=reg)          # default: grad_out's shape
    assert gy is None
    np.testing.assert_allclose(gx, grad, rtol=0)


def test_bad_calls_name_the_argument(reg):
    f = dlfuse.op_function("testref_scale_add")
    x = np.ones((3, 4), np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="y"):
        f(x, np.ones((5,), np.float32), registry=reg)
    with pytest.raises(TypeError, match="unexpected keyword argument 'alpha'"):
        f(x, x, alpha=1.0, registry=reg)
    with pytest.raises(TypeError, match="missing required argument 'y'"):
        f(x, registry=reg)
    # the same op by name through dlfuse.call
    out = dlfuse.call("testref_scale_add", x, x, scale=3.0, registry=reg)
    np.testing.assert_allclose(out, 4 * x)
