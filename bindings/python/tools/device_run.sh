#!/usr/bin/env bash
# The Python binding's job on the GPU machine (no registry, no oneDNN there): build libdlfuse,
# the CUDA plugin and bench/'s no-op plugin; run the pytest suite with PyTorch CUDA tensors,
# CuPy and JAX (CUDA cases must run: DLFUSE_REQUIRE_CUDA=1 turns their skips into failures);
# train the DLRM MLP with dlfuse and with pure PyTorch on CUDA (eager and torch.compile);
# time the per-call overhead. Logs go to $OUT (default /tmp/dlfuse-py-out).
#   bash bindings/python/tools/device_run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-/tmp/dlfuse-py-out}
mkdir -p "$OUT"
B=${BUILD_DIR:-/tmp/dlfuse-py-build}
exec > >(tee "$OUT/device_run.log") 2>&1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi -L || true
python3 -c "import sys, numpy, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 -c "import cupy; print('cupy', cupy.__version__)" || true
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" || true

# DLPack header: python3's apache-tvm-ffi, else the carried wheel (.whl), as tools/gpu_main.sh
DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
if [ -z "$DLINC" ] || [ ! -f "$DLINC/dlpack/dlpack.h" ]; then
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1 || true)
  [ -n "$whl" ] || { echo "no DLPack header: carry .whl"; exit 2; }
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
  DLINC=/tmp/dlpack-inc/tvm_ffi/include
fi
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DDLFUSE_BUILD_TESTS=OFF \
  -DDLFUSE_WITH_ONEDNN=OFF -DDLFUSE_WITH_OPENCL=OFF -DDLFUSE_WITH_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DDLPACK_INCLUDE_DIR="$DLINC" >"$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; exit 3; }
cmake --build "$B" -j "$(nproc)" --target dlfuse dlfuse_cli dlfuse_cuda >>"$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; exit 3; }
cmake --build "$B" -j "$(nproc)" --target dlfuse_noop >>"$OUT/cmake.log" 2>&1 || echo "(no noop plugin)"
echo "build: $(( $(date +%s) - t0 )) s"
export DLFUSE_LIBRARY=$B/lib/libdlfuse.so
"$B/bin/dlfuse" list

rc=0
echo "== pytest (CUDA required)"
DLFUSE_REQUIRE_CUDA=1 timeout 300 python3 -m pytest -v -rs -p no:cacheprovider \
  bindings/python/tests >"$OUT/pytest.log" 2>&1 || rc=1
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$OUT/pytest.log" | grep -v "^tests/test_numpy" | head -80
tail -25 "$OUT/pytest.log"

echo "== DLRM MLP on CUDA, eager"
timeout 150 python3 bindings/python/examples/dlrm_mlp.py --device cuda --steps 300 --batch 256 \
  >"$OUT/dlrm_eager.log" 2>&1 || rc=1
tail -12 "$OUT/dlrm_eager.log"
echo "== DLRM MLP on CUDA, torch.compile"
timeout 200 python3 bindings/python/examples/dlrm_mlp.py --device cuda --steps 300 --batch 256 --compile \
  >"$OUT/dlrm_compile.log" 2>&1 || rc=1
tail -12 "$OUT/dlrm_compile.log"

echo "== per-call overhead"
NOOP=$B/bench/plugins/libdlfuse_noop.so
timeout 120 python3 bindings/python/bench_overhead.py --framework torch --device cuda \
  --json "$OUT/overhead_torch_cuda.json" || rc=1
timeout 120 python3 bindings/python/bench_overhead.py --framework cupy --device cuda \
  --json "$OUT/overhead_cupy_cuda.json" || rc=1
[ -f "$NOOP" ] && timeout 120 python3 bindings/python/bench_overhead.py --framework numpy \
  --noop "$NOOP" --json "$OUT/overhead_numpy_noop.json"
echo "device_run rc=$rc"
exit $rc
