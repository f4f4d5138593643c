"""dlfuse.call: any op by name through its schema (ABI 1.2), with no per-op code: a core
op, and the op examples/cxx_plugin declares ($DLFUSE_EXAMPLE_PLUGIN, built with the tests)."""
import os

import numpy as np
import pytest

import dlfuse
from conftest import POISON, tol

EXAMPLE = os.environ.get("DLFUSE_EXAMPLE_PLUGIN")
needs_example = pytest.mark.skipif(not EXAMPLE, reason="DLFUSE_EXAMPLE_PLUGIN not set (a build without tests)")


@pytest.fixture(scope="module")
def example_registry():
    reg = dlfuse.Registry(plugin_paths=[EXAMPLE], discovery=0)
    yield reg


@needs_example
def test_declared_op_runs_by_name_against_float64(example_registry, rng):
    x = rng.uniform(-2, 2, 5)
    y = rng.uniform(-2, 2, 7)
    scale = float(rng.uniform(-2, 2))
    out = dlfuse.call("cxx_example_outer", x, y, scale=scale, registry=example_registry)
    assert out.shape == (5, 7) and out.dtype == np.float64
    np.testing.assert_allclose(out, scale * np.outer(x, y), rtol=1e-12, atol=1e-300)
    # A given output is written in full (poisoned first); SCALE defaults to 1.
    given = np.full((5, 7), POISON)
    res = dlfuse.call("cxx_example_outer", x, y, out=[given], registry=example_registry)
    assert res is given
    np.testing.assert_allclose(given, np.outer(x, y), rtol=1e-12, atol=1e-300)


@needs_example
def test_declared_op_is_validated_by_its_schema(example_registry):
    x, y = np.ones(3), np.ones(4)
    with pytest.raises(dlfuse.InvalidArgumentError, match="x: expected 1 dim"):
        dlfuse.call("cxx_example_outer", np.ones((3, 1)), y, registry=example_registry)
    with pytest.raises(dlfuse.InvalidArgumentError, match="'out'"):
        dlfuse.call("cxx_example_outer", x, y, out=[np.ones((4, 3))], registry=example_registry)
    with pytest.raises(TypeError, match="unexpected attribute 'sclae'"):
        dlfuse.call("cxx_example_outer", x, y, sclae=2.0, registry=example_registry)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        dlfuse.call("cxx_example_outer", x, registry=example_registry)
    with pytest.raises(dlfuse.NotFoundError):
        dlfuse.call("no_such_op", x, registry=example_registry)


def test_core_op_by_name_allocates_inferred_outputs(cpu_f32, rng):
    a = rng.standard_normal((2, 3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    out, pre = dlfuse.call("matmul_add_activation", a, b, bias, activation=dlfuse_act("tanh"))
    ref_pre = a.astype(np.float64) @ b.astype(np.float64) + bias
    rtol, atol = tol(np.float32)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(bias)
    assert out.shape == (2, 3, 4) and pre.shape == (2, 3, 4)
    assert np.all(np.abs(pre - ref_pre) <= atol + rtol * scale)
    assert np.all(np.abs(out - np.tanh(ref_pre)) <= atol + rtol * scale)


def dlfuse_act(name):
    """The int of an activation by its name, from the package's own table."""
    return dlfuse._ext.ACTIVATIONS[name]
