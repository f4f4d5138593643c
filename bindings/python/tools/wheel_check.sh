#!/usr/bin/env bash
# Proves `pip install ./bindings/python` gives a working package with nothing else set:
# builds the wheel (scikit-build-core, no build isolation: no registry needed; the CMake
# build folder is reused between runs), installs it into a fresh venv, and from outside the
# source tree runs both ops forward and backward against a float64 reference, on the
# libdlfuse and plugins inside the wheel. The CUDA plugin is left out unless
# DLFUSE_WHEEL_CUDA=ON (nvcc takes minutes; CI has no GPU), OpenCL unless DLFUSE_WHEEL_OPENCL=ON.
# Where the interpreter imports torch, the wheel must also hold the C++ torch operators, and
# dlfuse.torch from the venv must use them for a forward and backward of both ops.
#   wheel_check.sh <python3> <scratch dir>
set -euo pipefail
PY=$1 WORK=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
rm -rf "$WORK/dist" "$WORK/venv"
unset DLFUSE_LIBRARY DLFUSE_EXT_DIR DLFUSE_PLUGIN_PATH DLFUSE_PREFER
"$PY" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$WORK/dist" \
  -C build-dir="$WORK/build" -C cmake.define.DLFUSE_WITH_CUDA="${DLFUSE_WHEEL_CUDA:-OFF}" \
  -C cmake.define.DLFUSE_WITH_OPENCL="${DLFUSE_WHEEL_OPENCL:-OFF}" \
  "$SRC" 2>&1 | grep -v "Running pip as the 'root' user" || true
whl=$(ls "$WORK"/dist/dlfuse-*.whl)
# Fresh venv; NumPy (and torch, if present) come from the interpreter's own site-packages.
"$PY" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --no-deps --no-index --disable-pip-version-check "$whl" 2>&1 |
  grep -v "Running pip as the 'root' user" || true
cd "$WORK"
"$WORK/venv/bin/python" - "$WORK/venv" <<'PYEOF'
import os, sys
import numpy as np
import dlfuse
venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(dlfuse.__file__).startswith(venv), dlfuse.__file__
assert os.path.realpath(dlfuse.library_path()).startswith(venv), dlfuse.library_path()
print("plugins:", [(p.name, p.available, p.reason) for p in dlfuse.plugins()])
rng = np.random.default_rng(0)
x, y = rng.standard_normal((6, 5), np.float32), rng.standard_normal((6, 5), np.float32)
bias = rng.standard_normal(5, np.float32)
out = dlfuse.add_mul_activation(x, y, bias, 0.5, "relu")
pre = x.astype(np.float64) + bias + 0.5 * y
np.testing.assert_allclose(out, np.maximum(pre, 0), rtol=2e-5, atol=1e-5)
g = rng.standard_normal(out.shape, np.float32)
gx, gy, gb = dlfuse.add_mul_activation_backward(g, x, y, bias, 0.5, "relu")
d = np.where(pre > 0, g, 0.0)
np.testing.assert_allclose(gx, d, rtol=2e-5, atol=1e-5)
np.testing.assert_allclose(gy, 0.5 * d, rtol=2e-5, atol=1e-5)
np.testing.assert_allclose(gb, d.sum(0), rtol=2e-5, atol=1e-5)
a, b = rng.standard_normal((7, 4), np.float32), rng.standard_normal((4, 5), np.float32)
o = dlfuse.matmul_add_relu(a, b, bias)
z = a.astype(np.float64) @ b + bias
np.testing.assert_allclose(o, np.maximum(z, 0), rtol=2e-5, atol=1e-5)
g2 = rng.standard_normal(o.shape, np.float32)
ga, gbb, gbias = dlfuse.matmul_add_relu_backward(g2, a, b, o)
dz = np.where(z > 0, g2, 0.0)
np.testing.assert_allclose(ga, dz @ b.T.astype(np.float64), rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(gbb, a.T.astype(np.float64) @ dz, rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(gbias, dz.sum(0), rtol=1e-4, atol=1e-5)
print("wheel OK: dlfuse", dlfuse.__version__, "from", os.path.dirname(dlfuse.__file__),
      "library", dlfuse.library_path(), "ran on", dlfuse.registry().resolve("add_mul_activation"))
try:
    import torch
except ImportError:
    print("torch not importable: the C++ torch operators were not built; not checked")
    sys.exit(0)
import dlfuse.torch as dft
from dlfuse import _torch_cpp
assert dft.CPP_OPS, _torch_cpp.why_not
lin = torch.nn.Linear(4, 5)
at = torch.tensor(a, requires_grad=True)
out = dft.matmul_add_relu(at, lin.weight.t(), lin.bias)
assert "CppNode" in out.grad_fn.name(), out.grad_fn.name()
out.backward(torch.tensor(g2))
ref = torch.relu(at.detach().double() @ lin.weight.detach().double().t() + lin.bias.detach().double())
torch.testing.assert_close(out.detach().double(), ref, rtol=2e-5, atol=1e-5)
mask = (ref > 0).double() * torch.tensor(g2).double()
torch.testing.assert_close(lin.weight.grad.double(), mask.t() @ at.detach().double(), rtol=1e-4, atol=1e-5)
xt = torch.tensor(x, requires_grad=True)
z = dft.add_mul_activation(xt, torch.tensor(y), torch.tensor(bias), 0.5, "relu")
z.backward(torch.tensor(g))
torch.testing.assert_close(xt.grad.double(), torch.tensor(d).double(), rtol=2e-5, atol=1e-5)
print("wheel OK: torch", torch.__version__, "with dlfuse's C++ operators from", os.path.dirname(dft.__file__))
PYEOF
# Where the interpreter imports jax, the wheel must hold dlfuse.jax's XLA FFI handlers, and a
# jitted, differentiated call from the venv must run on them.
if "$WORK/venv/bin/python" -c "import jax" 2>/dev/null; then
  "$WORK/venv/bin/python" - <<'PYEOF'
import os
import jax, jax.numpy as jnp, numpy as np
import dlfuse.jax as djx
from dlfuse import _jax_ffi
assert os.path.isfile(os.path.join(os.path.dirname(djx.__file__), _jax_ffi.LIBRARY))
rng = np.random.default_rng(1)
a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((7, 4), (4, 5), (5,)))
f = jax.jit(jax.value_and_grad(lambda b: jnp.sum(djx.matmul_add_relu(a, b, bias))))
val, gb = f(b)
z = a.astype(np.float64) @ b + bias
np.testing.assert_allclose(val, np.maximum(z, 0).sum(), rtol=1e-5)
np.testing.assert_allclose(gb, a.T.astype(np.float64) @ (z > 0), rtol=1e-4, atol=1e-5)
print("wheel OK: jax", jax.__version__, "with dlfuse.jax's handlers from", os.path.dirname(djx.__file__))
PYEOF
fi
