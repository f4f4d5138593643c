"""Cases of test_attr_keys.py, run in a process whose default registry has the test plugin
testref_ops on DLFUSE_PLUGIN_PATH: its op testref_axpby declares its attributes under the
numbers of core keys with other types or ranges (tests/plugins/testref/extra_op.cpp):

    testref_axpby(x, y; ALPHA = 1.5, REPEAT = 3, BETA = 0.25, MODE = 2)
        -> SX * ALPHA * x + SY * REPEAT * y + BETA,
           (SX, SY) = (+1, -1) for MODE 0, (-1, +1) for MODE 1, (+1, +1) for MODE 2
    testref_axpby_backward(grad_out; ALPHA, REPEAT, MODE)
        -> SX * ALPHA * grad_out, SY * REPEAT * grad_out summed to y's shape
    ALPHA FLOAT64 under key 1 (a core op's ACTIVATION), REPEAT INT64 under key 2 (MULTIPLIER),
    BETA FLOAT64 under key 4 (OUTPUT_ACTIVATION), MODE INT64 in [0, 2] under key 3 (ALLOW_TF32,
    an INT64 of [0, 1] with default 0)

so a binding that reads an attribute by a core key gets wrong values: a float truncated, MODE
2 taken as a truth value (1) or refused by ALLOW_TF32's range, MODE's default taken as 0.
Every value is compared exactly with the float64 NumPy formula: x holds signed powers of two
and y, grad_out eighths, so that every product is exact and the sums are rounded in the same
order as the kernel's (any ALPHA times a power of two is exact; REPEAT is an integer).
`python attr_keys_cases.py GROUP` runs the cases named GROUP_* (numpy, torch, jax) and prints
one JSON object: case name -> "ok", "skip: why" or the traceback."""
import json
import os
import sys
import traceback

import numpy as np

ALPHA, REPEAT, BETA, MODE = 1.5, 3, 0.25, 2
DEFAULTS = (ALPHA, REPEAT, BETA, MODE)
SHAPE_X, SHAPE_Y = (3, 4), (4,)
# Attribute sets (alpha, repeat, beta, mode) that no binding could get right by a core key:
# every MODE, non-dyadic floats (a float32 or an int on the way would change them), negative
# and large REPEATs.
VALUES = ((0.7, -2, -1.25, 0), (2.5, 7, 0.1, 1), (-0.3, 1000, -1e-3, 2), (1.0 / 3.0, -1000, 0.0, 1))


def signs(mode):
    return (-1.0 if mode == 1 else 1.0), (-1.0 if mode == 0 else 1.0)


def ref(x, y, alpha=ALPHA, repeat=REPEAT, beta=BETA, mode=MODE):
    sx, sy = signs(mode)
    return (sx * alpha) * np.asarray(x, np.float64) + (sy * repeat) * np.asarray(y, np.float64) + beta


def ref_grads(g, alpha=ALPHA, repeat=REPEAT, mode=MODE):
    sx, sy = signs(mode)
    g = np.asarray(g, np.float64)
    return (sx * alpha) * g, (sy * repeat) * g.sum(axis=0)


def data(seed=0):
    """x: signed powers of two in [1/4, 4]; y and grad_out: eighths in [-2, 2]."""
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], SHAPE_X) * 2.0 ** rng.integers(-2, 3, SHAPE_X)
    return x, rng.integers(-16, 17, SHAPE_Y) / 8.0, rng.integers(-16, 17, SHAPE_X) / 8.0


def exact(got, want):
    """got (any array or tensor) is float64 and equals want element for element."""
    got = np.asarray(got)
    assert got.dtype == np.float64, got.dtype
    np.testing.assert_array_equal(got, want, strict=True)


def raises(kind, words, fn):
    """fn() raises `kind` (exactly that class or a subclass), its message holding each of words."""
    try:
        fn()
    except kind as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {kind.__name__} with {words}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {kind.__name__} with {words}, nothing raised")


def _kw(alpha, repeat, beta, mode):
    return {"alpha": alpha, "repeat": repeat, "beta": beta, "mode": mode}


# ---- dlfuse.<op> and dlfuse.call ---------------------------------------------------------


def numpy_schema_as_declared():
    import dlfuse
    params = [(n, k, pos) for n, k, pos, _r in dlfuse.op_function("testref_axpby").parameters()]
    attr = "attribute"
    assert params[:6] == [("x", "input", True), ("y", "input", True), ("alpha", attr, True), ("repeat", attr, True),
                          ("beta", attr, True), ("mode", attr, True)], params
    names = [n for n, *_ in dlfuse.op_function("testref_axpby_backward").parameters()]
    assert names[:4] == ["grad_out", "alpha", "repeat", "mode"] and "beta" not in names, names


def numpy_defaults_from_the_schema():
    import dlfuse
    x, y, g = data()
    exact(dlfuse.testref_axpby(x, y), ref(x, y))
    exact(dlfuse.call("testref_axpby", x, y), ref(x, y))
    # each attribute alone: the others keep their defaults
    exact(dlfuse.testref_axpby(x, y, alpha=0.7), ref(x, y, alpha=0.7))
    exact(dlfuse.testref_axpby(x, y, repeat=-2), ref(x, y, repeat=-2))
    exact(dlfuse.testref_axpby(x, y, beta=0.1), ref(x, y, beta=0.1))
    for mode in (0, 1, 2):
        exact(dlfuse.testref_axpby(x, y, mode=mode), ref(x, y, mode=mode))
        exact(dlfuse.call("testref_axpby", x, y, MODE=mode), ref(x, y, mode=mode))
    gx, gy = dlfuse.testref_axpby_backward(g, x_shape=SHAPE_X, y_shape=SHAPE_Y)
    want_x, want_y = ref_grads(g)
    exact(gx, want_x)
    exact(gy, want_y)
    for mode in (0, 1):
        gx, gy = dlfuse.testref_axpby_backward(g, mode=mode, x_shape=SHAPE_X, y_shape=SHAPE_Y)
        want_x, want_y = ref_grads(g, mode=mode)
        exact(gx, want_x)
        exact(gy, want_y)
    gx, gy = dlfuse.call("testref_axpby_backward", g, alpha=0.7, out=(None, np.empty(SHAPE_Y)))
    want_x, want_y = ref_grads(g, alpha=0.7)
    exact(gx, want_x)
    exact(gy, want_y)


def numpy_values_not_truncated():
    import dlfuse
    x, y, g = data(1)
    for alpha, repeat, beta, mode in VALUES:
        want = ref(x, y, alpha, repeat, beta, mode)
        exact(dlfuse.testref_axpby(x, y, alpha, repeat, beta, mode), want)
        exact(dlfuse.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode)), want)
        exact(dlfuse.call("testref_axpby", x, y, ALPHA=alpha, repeat=repeat, Beta=beta, mode=mode), want)
        want_x, want_y = ref_grads(g, alpha, repeat, mode)
        for gx, gy in (dlfuse.testref_axpby_backward(g, alpha, repeat, mode, x_shape=SHAPE_X, y_shape=SHAPE_Y),
                       dlfuse.testref_axpby_backward(g, mode=mode, repeat=repeat, alpha=alpha, x_shape=SHAPE_X,
                                                     y_shape=SHAPE_Y)):
            exact(gx, want_x)
            exact(gy, want_y)
    # NumPy scalars and 0-d arrays; a Python int for a FLOAT64 attribute
    exact(dlfuse.testref_axpby(x, y, np.float32(0.5), np.int64(7), np.array(-0.75), np.int32(1)),
          ref(x, y, 0.5, 7, -0.75, 1))
    exact(dlfuse.testref_axpby(x, y, alpha=2, beta=-1, mode=np.int8(0)), ref(x, y, 2.0, REPEAT, -1.0, 0))


def numpy_bad_values_name_the_argument():
    import dlfuse
    x, y, g = data(2)
    for call in (lambda v: dlfuse.testref_axpby(x, y, alpha=v), lambda v: dlfuse.testref_axpby(x, y, v),
                 lambda v: dlfuse.call("testref_axpby", x, y, alpha=v)):
        raises(TypeError, ["testref_axpby", "alpha", "real number", "str", "'abc'"], lambda: call("abc"))
        raises(TypeError, ["alpha", "real number", "ndarray"], lambda: call(np.array([1.0, 2.0])))
    raises(TypeError, ["beta", "real number", "str"], lambda: dlfuse.testref_axpby(x, y, beta="0.5"))
    raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: dlfuse.testref_axpby(x, y, repeat=2.5))
    raises(TypeError, ["repeat", "integer", "str"], lambda: dlfuse.testref_axpby(x, y, repeat="3"))
    raises(TypeError, ["repeat", "integer", "ndarray"], lambda: dlfuse.testref_axpby(x, y, 1.0, np.arange(3)))
    raises(ValueError, ["repeat", "int64"], lambda: dlfuse.testref_axpby(x, y, repeat=2**70))
    raises(dlfuse.InvalidArgumentError, ["REPEAT", "5000", "-1000..1000"],
           lambda: dlfuse.testref_axpby(x, y, repeat=5000))  # its range
    # MODE: an integer of [0, 2], neither a truth value nor a float
    for call in (lambda v: dlfuse.testref_axpby(x, y, mode=v), lambda v: dlfuse.testref_axpby(x, y, 1.0, 3, 0.0, v),
                 lambda v: dlfuse.call("testref_axpby", x, y, mode=v),
                 lambda v: dlfuse.testref_axpby_backward(g, mode=v, x_shape=SHAPE_X, y_shape=SHAPE_Y)):
        raises(TypeError, ["mode", "integer", "float", "1.5"], lambda: call(1.5))
        raises(TypeError, ["mode", "integer", "str", "'2'"], lambda: call("2"))
        raises(ValueError, ["mode", "int64"], lambda: call(-2**64))
        raises(dlfuse.InvalidArgumentError, ["testref_axpby", "MODE", "is 3", "0..2"], lambda: call(3))
        raises(dlfuse.InvalidArgumentError, ["MODE", "is -1", "0..2"], lambda: call(-1))
    raises(TypeError, ["beta"], lambda: dlfuse.testref_axpby_backward(g, beta=0.5, x_shape=SHAPE_X))  # not its
    raises(TypeError, ["'x'"], lambda: dlfuse.testref_axpby([1.0, 2.0], y))
    # the core ops keep their documented forms: activations by name, a float multiplier
    b = np.zeros(4)
    raises(TypeError, ["add_mul_activation", "multiplier", "real number", "str"],
           lambda: dlfuse.add_mul_activation(x, x, b, "abc"))
    raises(TypeError, ["activation", "float", "1.7"], lambda: dlfuse.add_mul_activation(x, x, b, 1.0, 1.7))
    raises(ValueError, ["activation must be one of", "swish"], lambda: dlfuse.add_mul_activation(x, x, b, 1.0, "swish"))
    np.testing.assert_array_equal(dlfuse.add_mul_activation(x, y, b, 0.5), np.maximum(x + 0.5 * y, 0))  # relu
    np.testing.assert_array_equal(dlfuse.add_mul_activation(x, y, b, 2, "identity"), x + 2 * y)


# ---- dlfuse.torch ---------------------------------------------------------------------------


def _torch():
    import torch

    import dlfuse.torch as dft
    want = os.environ.get("DLFUSE_TORCH_OPS") != "python"
    if want and not dft.CPP_OPS:
        from dlfuse import _torch_cpp
        return None, None, f"skip: the C++ operators are not loaded ({_torch_cpp.why_not})"
    assert dft.CPP_OPS == want, (dft.CPP_OPS, want)
    return torch, dft, None


def _check_grads(torch, dft, want, **attrs):
    """Values and gradients of testref_axpby(x, y, **attrs), want = (alpha, repeat, beta, mode)."""
    x64, y64, g64 = data(3)
    x = torch.tensor(x64, requires_grad=True)
    y = torch.tensor(y64, requires_grad=True)
    out = dft.testref_axpby(x, y, **attrs)
    assert out.requires_grad and out.grad_fn is not None
    exact(out.detach(), ref(x64, y64, *want))
    out.backward(torch.tensor(g64))
    want_x, want_y = ref_grads(g64, want[0], want[1], want[3])
    exact(x.grad, want_x)
    exact(y.grad, want_y)


def torch_forward_without_grad():
    torch, dft, skip = _torch()
    if skip:
        return skip
    x64, y64, _g = data(4)
    x, y = torch.tensor(x64), torch.tensor(y64)
    exact(dft.testref_axpby(x, y), ref(x64, y64))
    exact(dft.testref_axpby(x, y, mode=0), ref(x64, y64, mode=0))
    for alpha, repeat, beta, mode in VALUES:
        want = ref(x64, y64, alpha, repeat, beta, mode)
        exact(dft.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode)), want)
        exact(dft.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode), outputs="out"), want)  # the dispatcher's path
        exact(torch.ops.dlfuse.testref_axpby(x, y, alpha, repeat, beta, mode), want)  # the operator, in schema order
        exact(torch.ops.dlfuse.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode)), want)
    exact(dft.testref_axpby(x, y, alpha=0.7, outputs="out"), ref(x64, y64, 0.7))
    exact(torch.ops.dlfuse.testref_axpby(x, y), ref(x64, y64))  # the operator's defaults are the schema's
    with torch.no_grad():
        exact(dft.testref_axpby(x.requires_grad_(), y, alpha=2.5, mode=1), ref(x64, y64, 2.5, mode=1))


def torch_grad_defaults_from_the_schema():
    torch, dft, skip = _torch()
    if skip:
        return skip
    _check_grads(torch, dft, DEFAULTS)
    _check_grads(torch, dft, (ALPHA, REPEAT, BETA, 0), mode=0)
    _check_grads(torch, dft, (ALPHA, REPEAT, BETA, 1), mode=1)
    _check_grads(torch, dft, (ALPHA, -7, BETA, MODE), repeat=-7)
    # the backward's own operator: its defaults are the schema's (MODE 2, not ALLOW_TF32's 0)
    _x, _y, g64 = data(10)
    gx, gy = torch.ops.dlfuse.testref_axpby_backward(torch.tensor(g64), y_shape=list(SHAPE_Y))
    want_x, want_y = ref_grads(g64)
    exact(gx, want_x)
    exact(gy, want_y)


def torch_grad_values_not_truncated():
    torch, dft, skip = _torch()
    if skip:
        return skip
    for v in VALUES:
        _check_grads(torch, dft, v, **_kw(*v))
    _check_grads(torch, dft, (2.5, REPEAT, 0.7, MODE), alpha=2.5, beta=0.7)
    _check_grads(torch, dft, (0.5, 7, BETA, 1), alpha=np.float32(0.5), repeat=np.int64(7), mode=np.int64(1))


def torch_grad_through_the_dispatcher():
    torch, dft, skip = _torch()
    if skip:
        return skip
    x64, y64, g64 = data(5)
    for mode in (0, 1, 2):
        x = torch.tensor(x64, requires_grad=True)
        y = torch.tensor(y64, requires_grad=True)
        out = dft.testref_axpby(x, y, alpha=0.7, beta=-1.25, mode=mode, outputs=("out",))  # outputs=: the dispatcher
        exact(out.detach(), ref(x64, y64, 0.7, REPEAT, -1.25, mode))
        out.backward(torch.tensor(g64))
        want_x, want_y = ref_grads(g64, 0.7, REPEAT, mode)
        exact(x.grad, want_x)
        exact(y.grad, want_y)

    g = torch.tensor(g64)
    for attrs, want in (({"alpha": -0.375, "repeat": 2}, (-0.375, 2, BETA, MODE)),
                        ({"alpha": -0.375, "mode": 0}, (-0.375, REPEAT, BETA, 0)),
                        ({}, DEFAULTS)):
        x = torch.tensor(x64, requires_grad=True)
        y = torch.tensor(y64, requires_grad=True)

        def step(a, b, attrs=attrs):
            return (dft.testref_axpby(a, b, **attrs) * g).sum()
        loss = torch.compile(step, fullgraph=True, backend="aot_eager")(x, y)
        # out * g: eighths times eighths, summed exactly in any order
        exact(loss.detach(), (ref(x64, y64, *want) * g64).sum())
        loss.backward()
        want_x, want_y = ref_grads(g64, want[0], want[1], want[3])
        exact(x.grad, want_x)
        exact(y.grad, want_y)


def torch_bad_values_name_the_argument():
    torch, dft, skip = _torch()
    import dlfuse
    if skip:
        return skip
    x64, y64, _g = data(6)
    for grad in (False, True):
        x = torch.tensor(x64, requires_grad=grad)
        y = torch.tensor(y64)
        for extra in ({}, {"outputs": "out"}):
            f = dft.testref_axpby
            raises(TypeError, ["testref_axpby", "alpha", "real number", "str", "'abc'"],
                   lambda: f(x, y, alpha="abc", **extra))
            raises(TypeError, ["alpha", "real number", "ndarray"], lambda: f(x, y, alpha=np.array([1.0, 2.0]), **extra))
            raises(TypeError, ["beta", "real number", "str"], lambda: f(x, y, beta="0.5", **extra))
            raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: f(x, y, repeat=2.5, **extra))
            raises(ValueError, ["repeat", "int64"], lambda: f(x, y, repeat=2**70, **extra))
            raises(dlfuse.InvalidArgumentError, ["REPEAT", "-1001", "-1000..1000"],
                   lambda: f(x, y, repeat=-1001, **extra))
            raises(TypeError, ["mode", "integer", "float", "1.5"], lambda: f(x, y, mode=1.5, **extra))
            raises(TypeError, ["mode", "integer", "str"], lambda: f(x, y, mode="1", **extra))
            raises(ValueError, ["mode", "int64"], lambda: f(x, y, mode=2**64, **extra))
            for bad in (3, -1):
                raises(dlfuse.InvalidArgumentError, ["testref_axpby", "MODE", f"is {bad}", "0..2"],
                       lambda: f(x, y, mode=bad, **extra))
            raises(TypeError, ["testref_axpby", "y must be a torch.Tensor", "list"],
                   lambda: f(x, [1.0, 2.0, 3.0, 4.0], **extra))
            raises(TypeError, ["testref_axpby", "x must be a torch.Tensor", "list"], lambda: f([[1.0]], y, **extra))
    raises(TypeError, ["x must be a torch.Tensor", "ndarray"], lambda: dft.testref_axpby(x64, torch.tensor(y64)))
    # a plugin's op takes its attributes by name only (docs/python.md)
    raises(TypeError, ["testref_axpby", "positional"], lambda: dft.testref_axpby(x, y, 1.5, 3, 0.25, 2))
    # the core ops: activations by name, the multiplier a real number
    x, b = torch.tensor(x64, requires_grad=True), torch.zeros(4, dtype=torch.float64)
    raises(TypeError, ["multiplier", "real number", "str"], lambda: dft.add_mul_activation(x, x, b, "abc"))
    raises(TypeError, ["activation", "float"], lambda: dft.add_mul_activation(x, x, b, 1.0, 1.7))
    raises(ValueError, ["activation must be one of", "swish"], lambda: dft.add_mul_activation(x, x, b, 1.0, "swish"))
    raises(TypeError, ["FusedLinear", "activation", "float"], lambda: dft.FusedLinear(2, 3, activation=1.5))


# ---- dlfuse.jax -----------------------------------------------------------------------------


def _jax():
    """(jax, jnp, dlfuse.jax), or a skip string where dlfuse.jax is not built."""
    import jax
    jax.config.update("jax_platforms", "cpu")  # the test plugin is a CPU plugin
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from dlfuse import _jax_ffi
    try:
        _jax_ffi._library_file()  # the XLA FFI handlers: built only where jax was importable
    except ImportError as e:
        return None, None, f"skip: {e}"
    import dlfuse.jax as djx
    return jax, jnp, djx


def jax_defaults_from_the_schema():
    jax, jnp, djx = _jax()
    if jax is None:
        return djx
    x64, y64, g64 = data(7)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    exact(djx.testref_axpby(x, y), ref(x64, y64))
    exact(jax.jit(djx.testref_axpby)(x, y), ref(x64, y64))
    for attrs, want in (({}, DEFAULTS), ({"mode": 0}, (ALPHA, REPEAT, BETA, 0)),
                        ({"MODE": 1}, (ALPHA, REPEAT, BETA, 1)), ({"alpha": 0.7}, (0.7, REPEAT, BETA, MODE)),
                        ({"repeat": -2}, (ALPHA, -2, BETA, MODE)), ({"beta": 0.1}, (ALPHA, REPEAT, 0.1, MODE))):
        exact(jax.jit(lambda x, y, attrs=attrs: djx.testref_axpby(x, y, **attrs))(x, y), ref(x64, y64, *want))
        loss = lambda x, y, attrs=attrs: jnp.sum(djx.testref_axpby(x, y, **attrs) * g64)  # noqa: E731
        gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
        want_x, want_y = ref_grads(g64, want[0], want[1], want[3])
        exact(gx, want_x)
        exact(gy, want_y)
    # the backward called itself, with its own defaults: grad_y at grad_out's shape, not summed
    gx, gy = jax.jit(djx.testref_axpby_backward)(jnp.asarray(g64))
    exact(gx, (1.0 * ALPHA) * g64)
    exact(gy, (1.0 * REPEAT) * g64)
    gx, gy = djx.testref_axpby_backward(jnp.asarray(g64), mode=0, alpha=0.7)
    exact(gx, 0.7 * g64)
    exact(gy, (-1.0 * REPEAT) * g64)


def jax_values_not_truncated():
    jax, jnp, djx = _jax()
    if jax is None:
        return djx
    x64, y64, g64 = data(8)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    for alpha, repeat, beta, mode in VALUES:
        f = jax.jit(lambda x, y: djx.testref_axpby(x, y, alpha=alpha, REPEAT=repeat, beta=beta, Mode=mode))
        exact(f(x, y), ref(x64, y64, alpha, repeat, beta, mode))
        exact(djx.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode)), ref(x64, y64, alpha, repeat, beta, mode))
        loss = lambda x, y: jnp.sum(djx.testref_axpby(x, y, **_kw(alpha, repeat, beta, mode)) * g64)  # noqa: E731
        gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
        want_x, want_y = ref_grads(g64, alpha, repeat, mode)
        exact(gx, want_x)
        exact(gy, want_y)
    exact(djx.testref_axpby(x, y, alpha=np.float32(0.5), repeat=np.int64(7), mode=np.int64(0)),
          ref(x64, y64, 0.5, 7, BETA, 0))


def jax_bad_values_name_the_argument():
    import dlfuse
    jax, jnp, djx = _jax()
    if jax is None:
        return djx
    x64, y64, _g = data(9)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    for f in (djx.testref_axpby, lambda *a, **k: jax.jit(lambda x, y: djx.testref_axpby(x, y, *a[2:], **k))(*a[:2])):
        raises(TypeError, ["testref_axpby", "alpha", "real number", "str", "'abc'"], lambda: f(x, y, alpha="abc"))
        raises(TypeError, ["alpha", "real number", "ndarray"], lambda: f(x, y, alpha=np.array([1.0, 2.0])))
        raises(TypeError, ["beta", "real number", "str"], lambda: f(x, y, beta="0.5"))
        raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: f(x, y, repeat=2.5))
        raises(ValueError, ["repeat", "int64"], lambda: f(x, y, repeat=2**70))
        raises(dlfuse.InvalidArgumentError, ["REPEAT", "5000", "-1000..1000"], lambda: f(x, y, repeat=5000))
        raises(TypeError, ["mode", "integer", "float", "1.5"], lambda: f(x, y, mode=1.5))
        raises(TypeError, ["mode", "integer", "str"], lambda: f(x, y, mode="1"))
        raises(ValueError, ["mode", "int64"], lambda: f(x, y, mode=-2**64))
        for bad in (3, -1):
            raises(dlfuse.InvalidArgumentError, ["testref_axpby", "MODE", f"is {bad}", "0..2"],
                   lambda: f(x, y, mode=bad))
    f = djx.testref_axpby
    # a plugin's op takes its attributes by name only (docs/jax.md)
    raises(TypeError, ["testref_axpby", "2 inputs", "6 positional"], lambda: f(x, y, 1.5, 3, 0.25, 2))
    raises(TypeError, ["testref_axpby", "2 inputs", "3 positional"], lambda: f(x, y, 1))
    raises(TypeError, ["testref_axpby", "y must be an array", "list"], lambda: f(x, [1.0, 2.0, 3.0, 4.0]))
    raises(TypeError, ["alpha", "static"], lambda: jax.jit(lambda x, a: f(x, y, alpha=a))(x, 0.5))
    raises(TypeError, ["mode", "static"], lambda: jax.jit(lambda x, m: f(x, y, mode=m))(x, 1))
    b = jnp.zeros(4)
    raises(TypeError, ["multiplier", "real number", "str"], lambda: djx.add_mul_activation(x, x, b, "abc"))
    raises(TypeError, ["activation", "float"], lambda: djx.add_mul_activation(x, x, b, 1.0, 1.7))
    raises(ValueError, ["activation must be one of"], lambda: djx.add_mul_activation(x, x, b, 1.0, "swish"))


CASES = {name: fn for name, fn in list(globals().items()) if name.split("_")[0] in ("numpy", "torch", "jax")
         and callable(fn)}


def main(group):
    results = {}
    for name, fn in CASES.items():
        if not name.startswith(group + "_"):
            continue
        try:
            r = fn()
            results[name] = r if isinstance(r, str) else "ok"
        except BaseException:  # noqa: BLE001
            results[name] = traceback.format_exc()
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
