"""dlfuse.torch for an op no binding knows: testref_ops's testref_scale_add (a plugin's own
op, tests/plugins/testref/extra_op.cpp) becomes torch.ops.dlfuse.testref_scale_add with its
torch schema, kernel, fake kernel and autograd (through testref_scale_add_backward) derived
from the op schemas alone. In a subprocess: the plugin is loaded into the default registry."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

PLUGIN = os.path.join(os.environ.get("DLFUSE_TEST_PLUGIN_DIR", ""), "libdlfuse_testref_ops.so")

SCRIPT = r"""
import sys, torch, dlfuse
dlfuse.load_plugin(sys.argv[1])
import dlfuse.torch as dft

f = dft.testref_scale_add
assert f.op is torch.ops.dlfuse.testref_scale_add and dft.op_function("testref_scale_add") is f
assert "Tensor x, Tensor y, float scale=1" in str(f.op.default._schema), f.op.default._schema
for dt in (torch.float32, torch.float64):
    x = torch.randn(3, 4, dtype=dt, requires_grad=True)
    y = torch.randn(4, dtype=dt, requires_grad=True)
    out = f(x, y, scale=2.5)
    torch.testing.assert_close(out, x + 2.5 * y)
    g = torch.randn(3, 4, dtype=dt)
    out.backward(g)                                   # through testref_scale_add_backward
    torch.testing.assert_close(x.grad, g)
    torch.testing.assert_close(y.grad, 2.5 * g.sum(0))
    assert out.grad_fn is not None

# only the inputs that need a gradient get one
x = torch.randn(2, 3, dtype=torch.float64)
y = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
(gy,) = torch.autograd.grad(f(x, y).sum(), (y,))
torch.testing.assert_close(gy, torch.ones_like(y))

# the backward op directly: needs and the gradients' shapes
gx, gy = torch.ops.dlfuse.testref_scale_add_backward(torch.ones(3, 4), 2.0, [True, True], [], [3, 1], [4])
assert gx.shape == (3, 1) and gy.shape == (4,)
torch.testing.assert_close(gy, torch.full((4,), 6.0))

# traced as one opaque call, fake kernel included
def step(a, b):
    return (f(a, b, scale=3.0) * 2).sum()
a = torch.randn(5, 6, requires_grad=True)
b = torch.randn(6, requires_grad=True)
ca, cb = torch.autograd.grad(torch.compile(step, fullgraph=True, backend="aot_eager")(a, b), (a, b))
torch.testing.assert_close(ca, torch.full_like(a, 2.0))
torch.testing.assert_close(cb, torch.full_like(b, 30.0))
torch.library.opcheck(torch.ops.dlfuse.testref_scale_add.default, (a.detach(), b.detach(), 3.0))

# attributes are keyword arguments; a positional one is refused
try:
    f(a, b, 3.0)
except TypeError:
    pass
else:
    raise AssertionError("a positional attribute was taken")

# a bad call names the argument
try:
    f(torch.ones(3, 4), torch.ones(5))
except dlfuse.InvalidArgumentError as e:
    assert "y" in str(e), e
else:
    raise AssertionError("no error")
print("derived OK")
"""


def test_a_plugin_op_gets_a_derived_torch_op():
    if not os.path.exists(PLUGIN):
        pytest.skip(f"{PLUGIN} not built (DLFUSE_TEST_PLUGIN_DIR)")
    env = dict(os.environ)
    import dlfuse
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(dlfuse.__path__[0])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", SCRIPT, PLUGIN], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0 and "derived OK" in r.stdout, r.stdout + r.stderr


PARTIAL = r"""
import sys, torch, dlfuse, dlfuse.torch as dft
x = torch.randn(3, 4, requires_grad=True)
y, bias = torch.randn(3, 4), torch.randn(4)
try:
    dft.matmul_add_relu(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, requires_grad=True))
except dlfuse.UnsupportedError as e:
    assert "matmul_add_relu" in str(e), e
else:
    raise AssertionError("an op no plugin offers ran")
if sys.argv[1] == "forward-only":
    out = dft.add_mul_activation(x, y, bias, 0.5, "relu")       # the forward runs, with a node
    torch.testing.assert_close(out, torch.relu(x + bias + 0.5 * y))
    assert out.requires_grad
    try:
        out.sum().backward()
    except RuntimeError as e:
        assert "add_mul_activation_backward" in str(e), e
    else:
        raise AssertionError("a backward no plugin offers ran")
    with torch.no_grad():
        dft.add_mul_activation(x, y, bias, 0.5, "relu")
    try:  # no grad: the package's own path
        dft.matmul_add_relu(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2))
    except dlfuse.UnsupportedError as e:
        assert "matmul_add_relu" in str(e), e
    else:
        raise AssertionError("an op no plugin offers ran")
print("partial OK")
"""


@pytest.mark.parametrize("plugins", ["none", "forward-only"])
def test_a_registry_without_some_ops(plugins, tmp_path):
    """dlfuse.torch imports whatever its registry's plugins offer: a call of an op no plugin
    offers raises UnsupportedError; where a plugin offers a forward but not its backward (the
    cxx_plugin example: add_mul_activation alone), the forward runs with grad and the
    backward raises naming the missing op. A copy of libdlfuse without the plugin folder
    beside it, so that only DLFUSE_PLUGIN_PATH's plugins load."""
    import shutil
    import dlfuse
    example = os.environ.get("DLFUSE_EXAMPLE_PLUGIN", "")
    if plugins == "forward-only" and not os.path.exists(example):
        pytest.skip("DLFUSE_EXAMPLE_PLUGIN not built")
    lib = dlfuse._core._load_library()
    copy = tmp_path / os.path.basename(lib)
    shutil.copy(lib, copy)
    env = dict(os.environ, DLFUSE_LIBRARY=str(copy),
               DLFUSE_PLUGIN_PATH=example if plugins == "forward-only" else str(tmp_path / "none"))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(dlfuse.__path__[0])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", PARTIAL, plugins], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0 and "partial OK" in r.stdout, r.stdout + r.stderr
