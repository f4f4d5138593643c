"""Cases of test_attr_keys.py, run in a process whose default registry has the test plugin
testref_ops on DLFUSE_PLUGIN_PATH: its op testref_axpby declares its attributes under the
numbers of core keys with other types (tests/plugins/testref/extra_op.cpp):

    testref_axpby(x, y; ALPHA = 1.5, REPEAT = 3, BETA = 0.25) -> ALPHA * x + REPEAT * y + BETA
    ALPHA FLOAT64 under key 1 (a core op's ACTIVATION), REPEAT INT64 under key 2 (MULTIPLIER),
    BETA FLOAT64 under key 4 (OUTPUT_ACTIVATION)

so a binding that reads an attribute by a core key gets wrong values. Every value is checked
against the float64 NumPy formula. `python attr_keys_cases.py GROUP` runs the cases named
GROUP_* (numpy, torch, jax) and prints one JSON object: case name -> "ok", "skip: why" or the
traceback."""
import json
import os
import sys
import traceback

import numpy as np

ALPHA, REPEAT, BETA = 1.5, 3, 0.25
SHAPE_X, SHAPE_Y = (3, 4), (4,)


def ref(x, y, alpha=ALPHA, repeat=REPEAT, beta=BETA):
    return alpha * np.asarray(x, np.float64) + repeat * np.asarray(y, np.float64) + beta


def ref_grads(g, alpha=ALPHA, repeat=REPEAT):
    g = np.asarray(g, np.float64)
    return alpha * g, repeat * g.sum(axis=0)


def data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(SHAPE_X), rng.standard_normal(SHAPE_Y), rng.standard_normal(SHAPE_X)


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-14, atol=1e-14)


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


# ---- dlfuse.<op> and dlfuse.call ---------------------------------------------------------


def numpy_defaults_from_the_schema():
    import dlfuse
    x, y, g = data()
    close(dlfuse.testref_axpby(x, y), ref(x, y))
    close(dlfuse.testref_axpby(x, y, repeat=-2), ref(x, y, repeat=-2))
    close(dlfuse.call("testref_axpby", x, y), ref(x, y))
    gx, gy = dlfuse.testref_axpby_backward(g, x_shape=SHAPE_X, y_shape=SHAPE_Y)
    want_x, want_y = ref_grads(g)
    close(gx, want_x)
    close(gy, want_y)


def numpy_values_not_truncated():
    import dlfuse
    x, y, g = data(1)
    close(dlfuse.testref_axpby(x, y, 0.7, -2, -1.25), ref(x, y, 0.7, -2, -1.25))
    close(dlfuse.testref_axpby(x, y, alpha=2.5, beta=0.7), ref(x, y, alpha=2.5, beta=0.7))
    close(dlfuse.testref_axpby(x, y, np.float32(0.5), np.int64(7), np.array(-0.75)), ref(x, y, 0.5, 7, -0.75))
    close(dlfuse.call("testref_axpby", x, y, ALPHA=-1.25, repeat=5, Beta=2.5), ref(x, y, -1.25, 5, 2.5))
    gx, gy = dlfuse.testref_axpby_backward(g, 0.7, -2, x_shape=SHAPE_X, y_shape=SHAPE_Y)
    want_x, want_y = ref_grads(g, 0.7, -2)
    close(gx, want_x)
    close(gy, want_y)


def numpy_bad_values_name_the_argument():
    import dlfuse
    x, y, _g = data(2)
    for call in (lambda v: dlfuse.testref_axpby(x, y, alpha=v), lambda v: dlfuse.testref_axpby(x, y, v),
                 lambda v: dlfuse.call("testref_axpby", x, y, alpha=v)):
        raises(TypeError, ["testref_axpby", "alpha", "real number", "str", "'abc'"], lambda: call("abc"))
        raises(TypeError, ["alpha", "real number", "ndarray"], lambda: call(np.array([1.0, 2.0])))
    raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: dlfuse.testref_axpby(x, y, repeat=2.5))
    raises(TypeError, ["repeat", "integer", "str"], lambda: dlfuse.testref_axpby(x, y, repeat="3"))
    raises(TypeError, ["repeat", "integer", "ndarray"], lambda: dlfuse.testref_axpby(x, y, 1.0, np.arange(3)))
    raises(ValueError, ["repeat", "int64"], lambda: dlfuse.testref_axpby(x, y, repeat=2**70))
    raises(dlfuse.InvalidArgumentError, ["REPEAT"], lambda: dlfuse.testref_axpby(x, y, repeat=5000))  # its range
    raises(TypeError, ["'x'"], lambda: dlfuse.testref_axpby([1.0, 2.0], y))
    # the core ops keep their documented forms: activations by name, a float multiplier
    b = np.zeros(4)
    raises(TypeError, ["add_mul_activation", "multiplier", "real number", "str"],
           lambda: dlfuse.add_mul_activation(x, x, b, "abc"))
    raises(TypeError, ["activation", "float", "1.7"], lambda: dlfuse.add_mul_activation(x, x, b, 1.0, 1.7))
    raises(ValueError, ["activation must be one of", "swish"], lambda: dlfuse.add_mul_activation(x, x, b, 1.0, "swish"))
    close(dlfuse.add_mul_activation(x, y, b, 0.5), np.maximum(x + 0.5 * y, 0))  # relu by default
    close(dlfuse.add_mul_activation(x, y, b, 2, "identity"), x + 2 * y)


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
    """Values and gradients of testref_axpby(x, y, **attrs), want = (alpha, repeat, beta)."""
    x64, y64, g64 = data(3)
    x = torch.tensor(x64, requires_grad=True)
    y = torch.tensor(y64, requires_grad=True)
    out = dft.testref_axpby(x, y, **attrs)
    assert out.requires_grad and out.grad_fn is not None
    close(out.detach(), ref(x64, y64, *want))
    out.backward(torch.tensor(g64))
    want_x, want_y = ref_grads(g64, *want[:2])
    close(x.grad, want_x)
    close(y.grad, want_y)


def torch_forward_without_grad():
    torch, dft, skip = _torch()
    if skip:
        return skip
    x64, y64, _g = data(4)
    x, y = torch.tensor(x64), torch.tensor(y64)
    close(dft.testref_axpby(x, y), ref(x64, y64))
    close(dft.testref_axpby(x, y, alpha=0.7, repeat=-2, beta=-1.25), ref(x64, y64, 0.7, -2, -1.25))
    close(dft.testref_axpby(x, y, alpha=0.7, outputs="out"), ref(x64, y64, 0.7))  # the dispatcher's path
    with torch.no_grad():
        close(dft.testref_axpby(x.requires_grad_(), y, alpha=2.5), ref(x64, y64, 2.5))


def torch_grad_defaults_from_the_schema():
    torch, dft, skip = _torch()
    if skip:
        return skip
    _check_grads(torch, dft, (ALPHA, REPEAT, BETA))


def torch_grad_values_not_truncated():
    torch, dft, skip = _torch()
    if skip:
        return skip
    _check_grads(torch, dft, (0.7, -2, -1.25), alpha=0.7, repeat=-2, beta=-1.25)
    _check_grads(torch, dft, (2.5, REPEAT, 0.7), alpha=2.5, beta=0.7)
    _check_grads(torch, dft, (0.5, 7, BETA), alpha=np.float32(0.5), repeat=np.int64(7))


def torch_grad_through_the_dispatcher():
    torch, dft, skip = _torch()
    if skip:
        return skip
    x64, y64, g64 = data(5)
    x = torch.tensor(x64, requires_grad=True)
    y = torch.tensor(y64, requires_grad=True)
    out = dft.testref_axpby(x, y, alpha=0.7, beta=-1.25, outputs=("out",))  # outputs=: the dispatcher
    close(out.detach(), ref(x64, y64, 0.7, REPEAT, -1.25))
    out.backward(torch.tensor(g64))
    want_x, want_y = ref_grads(g64, 0.7)
    close(x.grad, want_x)
    close(y.grad, want_y)

    g = torch.tensor(g64)

    def step(a, b):
        return (dft.testref_axpby(a, b, alpha=-0.3, repeat=2) * g).sum()
    x.grad = y.grad = None
    loss = torch.compile(step, fullgraph=True, backend="aot_eager")(x, y)
    close(loss.detach(), (ref(x64, y64, -0.3, 2) * g64).sum())
    loss.backward()
    want_x, want_y = ref_grads(g64, -0.3, 2)
    close(x.grad, want_x)
    close(y.grad, want_y)


def torch_bad_values_name_the_argument():
    torch, dft, skip = _torch()
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
            raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: f(x, y, repeat=2.5, **extra))
            raises(ValueError, ["repeat", "int64"], lambda: f(x, y, repeat=2**70, **extra))
            raises(TypeError, ["testref_axpby", "y must be a torch.Tensor", "list"],
                   lambda: f(x, [1.0, 2.0, 3.0, 4.0], **extra))
            raises(TypeError, ["testref_axpby", "x must be a torch.Tensor", "list"], lambda: f([[1.0]], y, **extra))
    raises(TypeError, ["x must be a torch.Tensor", "ndarray"], lambda: dft.testref_axpby(x64, torch.tensor(y64)))
    # the core ops: activations by name, the multiplier a real number
    x, b = torch.tensor(x64, requires_grad=True), torch.zeros(4, dtype=torch.float64)
    raises(TypeError, ["multiplier", "real number", "str"], lambda: dft.add_mul_activation(x, x, b, "abc"))
    raises(TypeError, ["activation", "float"], lambda: dft.add_mul_activation(x, x, b, 1.0, 1.7))
    raises(ValueError, ["activation must be one of", "swish"], lambda: dft.add_mul_activation(x, x, b, 1.0, "swish"))
    raises(TypeError, ["FusedLinear", "activation", "float"], lambda: dft.FusedLinear(2, 3, activation=1.5))


# ---- dlfuse.jax -----------------------------------------------------------------------------


def _jax():
    import jax
    jax.config.update("jax_platforms", "cpu")  # the test plugin is a CPU plugin
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import dlfuse.jax as djx
    return jax, jnp, djx


def jax_defaults_from_the_schema():
    jax, jnp, djx = _jax()
    x64, y64, g64 = data(7)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    close(djx.testref_axpby(x, y), ref(x64, y64))
    close(jax.jit(djx.testref_axpby)(x, y), ref(x64, y64))
    gx, gy = jax.jit(jax.grad(lambda x, y: jnp.sum(djx.testref_axpby(x, y) * g64), argnums=(0, 1)))(x, y)
    want_x, want_y = ref_grads(g64)
    close(gx, want_x)
    close(gy, want_y)


def jax_values_not_truncated():
    jax, jnp, djx = _jax()
    x64, y64, g64 = data(8)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    for alpha, repeat, beta in ((0.7, -2, -1.25), (2.5, 3, 0.7), (-0.3, 1, 0.0)):
        f = jax.jit(lambda x, y: djx.testref_axpby(x, y, alpha=alpha, REPEAT=repeat, beta=beta))
        close(f(x, y), ref(x64, y64, alpha, repeat, beta))
        loss = lambda x, y: jnp.sum(djx.testref_axpby(x, y, alpha=alpha, repeat=repeat, beta=beta) * g64)  # noqa: E731
        gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
        want_x, want_y = ref_grads(g64, alpha, repeat)
        close(gx, want_x)
        close(gy, want_y)
    close(djx.testref_axpby(x, y, alpha=np.float32(0.5), repeat=np.int64(7)), ref(x64, y64, 0.5, 7))


def jax_bad_values_name_the_argument():
    jax, jnp, djx = _jax()
    x64, y64, _g = data(9)
    x, y = jnp.asarray(x64), jnp.asarray(y64)
    f = djx.testref_axpby
    raises(TypeError, ["testref_axpby", "alpha", "real number", "str", "'abc'"], lambda: f(x, y, alpha="abc"))
    raises(TypeError, ["alpha", "real number", "ndarray"], lambda: f(x, y, alpha=np.array([1.0, 2.0])))
    raises(TypeError, ["repeat", "integer", "float", "2.5"], lambda: f(x, y, repeat=2.5))
    raises(ValueError, ["repeat", "int64"], lambda: f(x, y, repeat=2**70))
    raises(TypeError, ["testref_axpby", "y must be an array", "list"], lambda: f(x, [1.0, 2.0, 3.0, 4.0]))
    raises(TypeError, ["alpha", "static"], lambda: jax.jit(lambda x, a: f(x, y, alpha=a))(x, 0.5))
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
