"""Run by test_jax.py in a process whose default registry has the test plugin testref_ops
(testref_scale_add and its backward) and examples/cxx_plugin (cxx_example_outer, a shape
callback, no backward) on DLFUSE_PLUGIN_PATH: dlfuse.jax's functions derived from their
schemas, under jit, grad and vmap, against float64 NumPy. With the argument "cuda": only that
the same call on CUDA arrays, where no plugin serves the op, is JAX's error with dlfuse's
[UNSUPPORTED]. Prints "ok" last."""
import sys

import jax

if sys.argv[1:] != ["cuda"]:
    jax.config.update("jax_platforms", "cpu")  # both plugins are CPU plugins
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import dlfuse  # noqa: E402
import dlfuse.jax as djx  # noqa: E402

if sys.argv[1:] == ["cuda"]:
    x = jax.device_put(jnp.ones((3, 4), jnp.float32), jax.devices("cuda")[0])
    try:
        jax.block_until_ready(djx.testref_scale_add(x, x))
    except Exception as e:  # XlaRuntimeError
        assert "[UNSUPPORTED]" in str(e) and "testref_scale_add" in str(e), str(e)
    else:
        raise AssertionError("testref_scale_add ran on CUDA arrays")
    print("ok")
    sys.exit(0)

rng = np.random.default_rng()
for dtype, tol in (("float64", 1e-12), ("float32", 2e-5)):
    x64, y64 = rng.standard_normal((3, 4)), rng.standard_normal(4)
    x, y = jnp.asarray(x64, dtype), jnp.asarray(y64, dtype)
    xr, yr = np.asarray(x, np.float64), np.asarray(y, np.float64)
    f = djx.testref_scale_add
    assert djx.op_function("testref_scale_add") is f
    np.testing.assert_allclose(jax.jit(lambda x, y: f(x, y, scale=2.5))(x, y), xr + 2.5 * yr, rtol=tol, atol=tol)
    np.testing.assert_allclose(f(x, y), xr + yr, rtol=tol, atol=tol)  # SCALE's default, 1
    # grad through testref_scale_add_backward: grad_y summed to y's shape (REDUCIBLE)
    loss = lambda x, y: jnp.sum(f(x, y, SCALE=-1.5) * x)  # noqa: E731
    gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, y)
    assert gy.shape == (4,) and gx.dtype == x.dtype
    np.testing.assert_allclose(gx, 2 * xr - 1.5 * yr, rtol=tol, atol=10 * tol)
    np.testing.assert_allclose(gy, -1.5 * xr.sum(axis=0), rtol=tol, atol=10 * tol)
    # vmap, one example at a time; per-example gradients
    xs = jnp.stack([x, 2 * x])
    np.testing.assert_allclose(jax.vmap(lambda x: f(x, y, scale=3.0))(xs), np.stack([xr, 2 * xr]) + 3 * yr,
                               rtol=tol, atol=tol)
    gys = jax.vmap(jax.grad(lambda x, y: jnp.sum(f(x, y)), argnums=1), in_axes=(0, None))(xs, y)
    np.testing.assert_allclose(gys, np.full((2, 4), 3.0), rtol=0)
    # a shape callback and no backward: forward only
    a, b = jnp.asarray(rng.standard_normal(3), dtype), jnp.asarray(rng.standard_normal(5), dtype)
    outer = djx.cxx_example_outer
    got = jax.jit(lambda a, b: outer(a, b, scale=2.0))(a, b)
    assert got.shape == (3, 5), got.shape
    np.testing.assert_allclose(got, 2.0 * np.outer(np.asarray(a, np.float64), np.asarray(b, np.float64)),
                               rtol=tol, atol=tol)

# a core op with no function of its own in dlfuse.jax: the backward, forward-only
g, a, b = (jnp.asarray(rng.standard_normal(s)) for s in ((4, 5), (4, 3), (3, 5)))
out = np.maximum(np.asarray(a) @ np.asarray(b), 0)
ga, gb, gbias = djx.op_function("matmul_add_activation_backward")(g, a, b, jnp.asarray(out), None,
                                                                 activation="relu")
dz = np.asarray(g) * (out > 0)
np.testing.assert_allclose(ga, dz @ np.asarray(b).T, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(gb, np.asarray(a).T @ dz, rtol=1e-12, atol=1e-12)
assert gbias.shape == (4, 5)  # REDUCIBLE: its widest shape, nothing to sum it to
np.testing.assert_allclose(gbias, dz, rtol=1e-12, atol=1e-12)

x = jnp.ones((3, 4))
for bad, kind, text in ((lambda: djx.testref_scale_add(x, jnp.ones(5)), dlfuse.InvalidArgumentError, "'y'"),
                        (lambda: djx.testref_scale_add(x, x, alpha=1.0), TypeError, "unexpected argument 'alpha'"),
                        (lambda: djx.testref_scale_add(x, x, x), TypeError, "takes 2 inputs"),
                        (lambda: djx.testref_scale_add(x, x, y=x), TypeError, "multiple values for input 'y'"),
                        (lambda: djx.no_such_op, AttributeError, "no attribute 'no_such_op'")):
    try:
        bad()
    except kind as e:
        assert text in str(e), (text, str(e))
    else:
        raise AssertionError(f"no {kind.__name__} ({text})")
print("ok")
