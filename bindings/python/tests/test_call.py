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


@needs_example
def test_an_op_no_plugin_offers_is_unsupported_an_unknown_name_not_found(example_registry):
    """The registry of the example plugin alone has matmul_add_relu's schema and nothing
    serving it: UNSUPPORTED, as the op's generated function says; a name with no schema is
    NOT_FOUND."""
    a, bias = np.ones((2, 2), np.float32), np.ones(2, np.float32)
    with pytest.raises(dlfuse.UnsupportedError, match="matmul_add_relu"):
        dlfuse.call("matmul_add_relu", a, a, bias, registry=example_registry)
    with pytest.raises(dlfuse.UnsupportedError, match="matmul_add_relu"):
        dlfuse.matmul_add_relu(a, a, bias, registry=example_registry)
    with pytest.raises(dlfuse.NotFoundError, match="no_such_op"):
        dlfuse.call("no_such_op", a, registry=example_registry)


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


@needs_example
def test_declared_op_has_a_generated_function(example_registry, rng):
    """The plugin's op through the function derived from its schema: inputs then attributes
    positionally, outputs by name; in a subprocess, loaded into the default registry, it is
    also the module attribute dlfuse.cxx_example_outer."""
    f = dlfuse.op_function("cxx_example_outer")
    x, y = rng.uniform(-2, 2, 5), rng.uniform(-2, 2, 3)
    np.testing.assert_allclose(f(x, y, 2.0, registry=example_registry), 2.0 * np.outer(x, y), rtol=1e-12)
    given = np.full((5, 3), POISON)
    assert f(x, y, out=given, registry=example_registry) is given
    np.testing.assert_allclose(given, np.outer(x, y), rtol=1e-12)
    assert [p[0] for p in f.parameters(example_registry)][:4] == ["x", "y", "scale", "out"]
    import subprocess
    import sys
    code = ("import sys, numpy as np, dlfuse\n"
            "dlfuse.load_plugin(sys.argv[1])\n"
            "out = dlfuse.cxx_example_outer(np.ones(2), np.arange(3.0), scale=3.0)\n"
            "assert out.tolist() == [[0.0, 3.0, 6.0]] * 2, out\n"
            "assert 'cxx_example_outer' in dlfuse.op_names()\n"
            "print('OK')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(dlfuse.__path__[0])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    r = subprocess.run([sys.executable, "-c", code, EXAMPLE], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_op_function_misuse_is_an_error_not_a_crash():
    from dlfuse import _ext
    with pytest.raises(AttributeError):
        dlfuse.no_such_op  # noqa: B018
    with pytest.raises(dlfuse.NotFoundError, match="no_such_op"):
        dlfuse.op_function("no_such_op")(np.ones(2))
    bad = _ext.OpFunction("add_mul_activation", ("x", "nope"), 1)
    with pytest.raises(TypeError, match="no parameter 'nope'"):
        bad(np.ones(2))
    with pytest.raises(TypeError):
        _ext.OpFunction("add_mul_activation", ["x"])  # positional must be a tuple
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="at most 7 positional"):
        dlfuse.add_mul_activation(x, x, x[0], 1.0, "relu", None, None, None)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        dlfuse.add_mul_activation(x, x, x[0], x=x)
    with pytest.raises(ValueError, match="needs must be a sequence of 3"):
        dlfuse.matmul_add_relu_backward(x, x, x.T, x, needs=(True,))
    # shapes-only inference, as dlfuse.torch's fake kernels use it
    assert _ext.infer("matmul_add_relu", [(2, 3, 4), (4, 5), (5,)], 2, 32, {}, None) == [(2, 3, 5)]
    with pytest.raises(dlfuse.InvalidArgumentError, match="b"):
        _ext.infer("matmul_add_relu", [(2, 3, 4), (3, 5), (5,)], 2, 32, {}, None)
    with pytest.raises(TypeError, match="takes 3 inputs"):
        _ext.infer("matmul_add_relu", [(2, 3)], 2, 32, {}, None)
    with pytest.raises(TypeError):
        _ext.infer("matmul_add_relu", [(2, "x"), (3, 5), (5,)], 2, 32, {}, None)
    ins, outs, attrs = _ext.schema("add_mul_activation", None)
    assert [i[0] for i in ins] == ["x", "y", "bias"] and [o[0] for o in outs] == ["out"]
    assert {a[0] for a in attrs} == {"activation", "multiplier"}
