#!/usr/bin/env bash
# Proves `pip install ./bindings/python` works: installs a copy of the package folder (so
# setuptools' build/ and *.egg-info never land in the source tree) into a scratch target,
# imports dlfuse from there (not from the source tree) and runs one op against the
# libdlfuse named by $DLFUSE_LIBRARY.
#   pip_install_check.sh <python3> <bindings/python> <scratch dir>
set -euo pipefail
PY=$1 SRC=$2 WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK/src"
cp -r "$SRC/pyproject.toml" "$SRC/README.md" "$SRC/src" "$WORK/src/"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  --no-cache-dir --target "$WORK/site" "$WORK/src" 2>&1 | grep -v "Running pip as the 'root' user" || true
test -f "$WORK/site/dlfuse/__init__.py" || { echo "pip did not install dlfuse into $WORK/site"; exit 1; }
cd "$WORK"
PYTHONPATH="$WORK/site" "$PY" - "$WORK/site" <<'PYEOF'
import os, sys
import numpy as np
import dlfuse
site = sys.argv[1]
assert os.path.realpath(dlfuse.__file__).startswith(os.path.realpath(site)), dlfuse.__file__
x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
out = dlfuse.add_mul_activation(x, x, np.ones(3, np.float32), 0.5, "relu")
want = np.maximum(x + 1 + 0.5 * x, 0)
assert np.array_equal(out, want), (out, want)
print("installed dlfuse", dlfuse.__version__, "from", os.path.dirname(dlfuse.__file__),
      "ran add_mul_activation on", dlfuse.registry().resolve("add_mul_activation"))
PYEOF
