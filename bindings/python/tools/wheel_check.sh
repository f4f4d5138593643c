#!/usr/bin/env bash
# The README's `pip install ./bindings/python` as users get it, with nothing else set:
#  1. a fresh venv, and in it that command from the repository root: pip's default build
#     isolation (scikit-build-core and apache-tvm-ffi from the package index), no -C option,
#     so every plugin this machine can build (CUDA wherever nvcc is: its device code for the
#     project's default architectures).
#  2. from outside the source tree, no DLFUSE_* variable: every op forward and backward on CPU
#     against float64 (wheel_ops.py), first with neither torch nor jax installed, then with
#     jax (dlfuse.jax's handlers are in the wheel: jaxlib is a build requirement); the CUDA
#     plugin, where built, is listed, carries CUTLASS (its version says `+cutlass`), and
#     without a GPU is listed unavailable with a reason; it needs cuBLASLt by soname, not
#     libcudart, and finds cuBLASLt first in site-packages' nvidia/cu13/lib or
#     nvidia/cublas/lib (PyTorch's nvidia-* wheels), else in the toolkit it was built with.
#  3. the sdist (`python -m build --sdist`), unpacked in a fresh folder, builds the same wheel
#     (same files, name and version); `auditwheel show` on it names a manylinux tag. That
#     build leaves the CUDA plugin out (DLFUSE_WITH_CUDA=OFF: its device code is minutes of
#     compiling, which step 1 already did from the same files), and is the same wheel less
#     that one library; the sdist must hold every file of plugins/cuda instead.
#  4. one version: the wheel's, dlfuse.__version__, the package metadata's and the CMake
#     package's are the project's (the argument, project(VERSION) of CMakeLists.txt).
#  5. the wheel for other machines: `auditwheel repair` of that wheel grafts what it links
#     beyond the manylinux policy (oneDNN, libgomp, the OpenCL ICD loader) into dlfuse.libs/;
#     every library of the repaired wheel then resolves its non-system links there. Installed
#     into a fresh venv (NumPy from the index, the wheel with --no-index) and run with no
#     compiler on the PATH, it passes every op forward and backward on CPU. Its size is printed.
# Each step's time is printed.
#   wheel_check.sh <python3> <scratch dir> <project version>
set -euo pipefail
PY=$1 WORK=$2 VERSION=$3
SRC=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$SRC/../.." && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
unset DLFUSE_LIBRARY DLFUSE_EXT_DIR DLFUSE_PLUGIN_PATH DLFUSE_PREFER
export PIP_DISABLE_PIP_VERSION_CHECK=1
no_root_note() { grep -v "Running pip as the 'root' user" || true; }
t=$(date +%s)
lap() { echo "== $1: $(($(date +%s) - t)) s"; t=$(date +%s); }
# Whether CMake finds a CUDA compiler here, as the wheel's build asks it.
mkdir "$WORK/probe"
echo 'cmake_minimum_required(VERSION 3.25)
project(probe NONE)
include(CheckLanguage)
check_language(CUDA)
file(WRITE ${CMAKE_BINARY_DIR}/cuda "${CMAKE_CUDA_COMPILER}")' >"$WORK/probe/CMakeLists.txt"
cmake -S "$WORK/probe" -B "$WORK/probe/build" >/dev/null
have_nvcc=0
[ -n "$(cat "$WORK/probe/build/cuda")" ] && have_nvcc=1

# 1. The README's commands, with nothing set (tools/test.sh narrows CUDAARCHS for its own
#    builds on a machine without a GPU; a user's install builds every architecture).
unset CUDAARCHS
"$PY" -m venv "$WORK/venv"
V=$WORK/venv/bin/python
(cd "$ROOT" && "$WORK/venv/bin/pip" install -q ./bindings/python 2>&1 | no_root_note)
lap "pip install ./bindings/python (fresh venv)"

# 2. The installed package, from outside the source tree.
cd "$WORK"
SITE=$("$V" -c "import sysconfig; print(sysconfig.get_path('platlib'))")
PKG=$SITE/dlfuse
"$V" "$SRC/tools/wheel_ops.py" cpu
[ -f "$PKG/libdlfuse_jax.so" ] || { echo "the wheel has no dlfuse.jax handlers (libdlfuse_jax.so)"; exit 1; }
lap "ops from the installed package, neither torch nor jax installed"
"$WORK/venv/bin/pip" install -q "jax>=0.10" 2>&1 | no_root_note
"$V" "$SRC/tools/wheel_ops.py" cpu --jax
lap "with jax installed"
CUDA_PLUGIN=$PKG/lib/dlfuse/plugins/libdlfuse_cuda.so
if ((have_nvcc)); then
  [ -f "$CUDA_PLUGIN" ] || { echo "CMake finds a CUDA compiler here, yet the wheel has no CUDA plugin"; exit 1; }
  gpu=0
  nvidia-smi -L >/dev/null 2>&1 && gpu=1
  "$V" - "$gpu" <<'PYEOF'
import sys, dlfuse
gpu = sys.argv[1] == "1"
p = {p.name: p for p in dlfuse.plugins()}["cuda"]
print("cuda plugin:", p.available, p.reason)
assert p.available == gpu and (gpu or p.reason), p
assert "+cutlass" in p.version, f"the CUDA plugin was built without CUTLASS: version {p.version}"
PYEOF
  dyn=$(readelf -d "$CUDA_PLUGIN")
  echo "$dyn" | grep -E "NEEDED|RUNPATH"
  echo "$dyn" | grep -q "NEEDED.*\[libcublasLt\.so\.[0-9]*\]" || { echo "no NEEDED libcublasLt"; exit 1; }
  ! echo "$dyn" | grep -q "NEEDED.*libcudart" || { echo "libcudart is linked dynamically"; exit 1; }
  lt=$(echo "$dyn" | grep -o "libcublasLt\.so\.[0-9]*")
  tk=$(echo "$dyn" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p' | tr ':' '\n' | tail -1)
  [ -f "$tk/$lt" ] || { echo "the RUNPATH's toolkit folder $tk has no $lt"; exit 1; }
  found=$(ldd "$CUDA_PLUGIN" | awk -v l="$lt" '$1 == l {print $3}')
  echo "$lt from the toolkit: $found"
  [ -f "$found" ] || { echo "$lt is not found"; exit 1; }
  # An nvidia-* wheel's copy beside dlfuse comes first (a link to the toolkit's stands in).
  for d in nvidia/cu13/lib nvidia/cublas/lib; do
    mkdir -p "$SITE/$d"
    ln -s "$(realpath "$found")" "$SITE/$d/$lt"
    got=$(ldd "$CUDA_PLUGIN" | awk -v l="$lt" '$1 == l {print $3}')
    echo "$lt with site-packages/$d: $got"
    [ "$(realpath -sm "$got")" = "$(realpath -sm "$SITE/$d/$lt")" ] || { echo "site-packages/$d/$lt is not used"; exit 1; }
    rm -rf "$SITE/nvidia"
  done
else
  [ ! -e "$CUDA_PLUGIN" ] || { echo "CMake finds no CUDA compiler here, yet the wheel has a CUDA plugin"; exit 1; }
fi
lap "the CUDA plugin"

# 3. The sdist, unpacked in a fresh folder, builds the same wheel.
"$PY" -m build --sdist --outdir "$WORK/sdist" "$SRC" >"$WORK/sdist.log" 2>&1 || { tail -30 "$WORK/sdist.log"; exit 1; }
mkdir "$WORK/fresh"
tar -xzf "$WORK"/sdist/dlfuse-*.tar.gz -C "$WORK/fresh"
no_cuda=()
if ((have_nvcc)); then
  no_cuda=(-C cmake.define.DLFUSE_WITH_CUDA=OFF)
  cuda_src=$(cd "$ROOT/plugins/cuda" && find . -type f ! -name '*.pyc' | sort)
  cuda_sdist=$(cd "$WORK"/fresh/dlfuse-*/project/plugins/cuda && find . -type f ! -name '*.pyc' | sort)
  [ "$cuda_src" = "$cuda_sdist" ] ||
    { echo "the sdist's plugins/cuda differs from the source tree's:"; diff <(echo "$cuda_src") <(echo "$cuda_sdist"); exit 1; }
fi
(cd "$WORK/fresh" && "$V" -m pip wheel -q --no-deps "${no_cuda[@]}" -w "$WORK/dist" ./dlfuse-* 2>&1 | no_root_note)
whl=$(ls "$WORK"/dist/dlfuse-*.whl)
lap "sdist, and a wheel from it"
"$V" - "$whl" "$SITE" "$VERSION" "$have_nvcc" <<'PYEOF'
import glob, os, sys, zipfile
import importlib.metadata as md
whl, site, version, cuda_left_out = sys.argv[1:4] + [sys.argv[4] == "1"]
names = {n for n in zipfile.ZipFile(whl).namelist() if not n.startswith("dlfuse-")}
dist = md.distribution("dlfuse")
installed = {str(f) for f in dist.files if str(f).startswith("dlfuse/") and "__pycache__" not in str(f)}
if cuda_left_out:
    cuda = {n for n in installed if os.path.basename(n) == "libdlfuse_cuda.so"}
    assert len(cuda) == 1, f"the installed package's CUDA plugin: {sorted(cuda)}"
    installed -= cuda
assert names == installed, f"only in the sdist's wheel: {sorted(names - installed)}; only in the installed one: {sorted(installed - names)}"
print(f"sdist's wheel: {os.path.basename(whl)}, the same {len(names)} files as the installed package"
      + (" less its CUDA plugin" if cuda_left_out else ""))
# one version everywhere
import dlfuse
cfg = open(os.path.join(site, "dlfuse/lib/cmake/dlfuse/dlfuseConfigVersion.cmake")).read()
versions = {"project": version, "wheel file": os.path.basename(whl).split("-")[1],
            "package metadata": dist.version, "dlfuse.__version__": dlfuse.__version__,
            "CMake package": cfg.split('set(PACKAGE_VERSION "')[1].split('"')[0]}
print("versions:", versions)
assert len(set(versions.values())) == 1, versions
PYEOF
"$PY" -m auditwheel show "$whl" | tee "$WORK/auditwheel.txt"
tag=$(tr -s ' \n' ' ' <"$WORK/auditwheel.txt" | grep -oE '"manylinux_2_[0-9]+_x86_64"' | head -1)
[ -n "$tag" ] || { echo "auditwheel names no manylinux tag"; exit 1; }
lap "same wheel, versions, auditwheel ($tag)"

# 5. The repaired wheel, in a fresh venv, with nothing on the PATH but the venv.
# docs/python.md's command ("libcublasLt" keeps a CUDA plugin's cuBLASLt out).
"$PY" -m auditwheel repair --exclude 'libcublasLt.so.*' -w "$WORK/repaired" "$whl" >"$WORK/repair.log" 2>&1 || { tail -20 "$WORK/repair.log"; exit 1; }
rwhl=$(ls "$WORK"/repaired/dlfuse-*.whl)
R=$WORK/venv-repaired
"$PY" -m venv "$R"
"$R/bin/pip" install -q "numpy>=2.1" 2>&1 | no_root_note
"$R/bin/pip" install -q --no-index --no-deps "$rwhl" 2>&1 | no_root_note
RSITE=$("$R/bin/python" -c "import sysconfig; print(sysconfig.get_path('platlib'))")
grafted=$(cd "$RSITE/dlfuse.libs" && ls)
echo "grafted into dlfuse.libs: $(echo $grafted)"
for lib in $(find "$RSITE/dlfuse" -name '*.so*' -type f); do
  deps=$(ldd "$lib")
  ! echo "$deps" | grep -q "not found" || { echo "$lib: $(echo "$deps" | grep "not found")"; exit 1; }
  for g in $grafted; do
    at=$(echo "$deps" | awk -v g="$g" '$1 == g {print $3}')
    [ -z "$at" ] || [ "$(realpath "$at")" = "$(realpath "$RSITE/dlfuse.libs/$g")" ] ||
      { echo "$lib: $g from $at, not from the wheel"; exit 1; }
  done
done
(cd "$WORK" && env -i HOME="$HOME" PATH="$R/bin" "$R/bin/python" - <<'PYEOF'
import shutil
assert not any(shutil.which(c) for c in ("cc", "gcc", "c++", "g++", "clang", "nvcc")), "a compiler is on the PATH"
PYEOF
)
(cd "$WORK" && env -i HOME="$HOME" PATH="$R/bin" "$R/bin/python" "$SRC/tools/wheel_ops.py" cpu)
lap "auditwheel repair: $(basename "$rwhl"), $(($(stat -c %s "$rwhl") / 1048576)) MiB, installed and run"

echo "wheel check OK: $(basename "$whl"), platform tag $tag"
