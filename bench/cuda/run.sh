#!/usr/bin/env bash
# Builds the CUDA plugin, runs its conformance suite on the GPU, times it through the
# dlfuse C API next to cuBLASLt and PyTorch (eager, torch._addmm_activation, torch.compile)
# in the same run, and writes a ratio table (report.md) plus JSON/CSV to $OUT.
#
#   bash bench/cuda/run.sh            # everything (about 6 minutes on an H100)
#   bash bench/cuda/run.sh check      # build + conformance (+ compute-sanitizer) + quick bench
#   bash bench/cuda/run.sh bench      # build + conformance + full bench + torch peers + report
#
# Needs nvcc, CMake, ninja, python3 with torch and triton. DLPack: from the apache-tvm-ffi
# wheel (importable, or carried as .whl/apache_tvm_ffi-*.whl at the repo root).
set -euo pipefail
MODE=${1:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/dlfuse-cuda-bench}
B=${BUILD_DIR:-/tmp/b-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")

if DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null); then :; else
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl | head -1)
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
  DLINC=/tmp/dlpack-inc/tvm_ffi/include
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: bash bench/cuda/run.sh $MODE"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) (working tree may differ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  "$NVCC" --version | tail -1
} | tee "$OUT/env.txt"

cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFUSE_WITH_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 -DDLFUSE_WITH_ONEDNN=OFF \
  -DDLFUSE_WITH_OPENCL=OFF -DDLFUSE_BUILD_TESTS=OFF -DDLPACK_INCLUDE_DIR="$DLINC" >"$B.build.log" 2>&1
cmake --build "$B" --target dlfuse_cli dlfuse_cuda >>"$B.build.log" 2>&1 || { tail -40 "$B.build.log"; exit 1; }
PLUGIN="$B/lib/dlfuse/plugins/libdlfuse_cuda.so"
"$B/bin/dlfuse" list | tee -a "$OUT/env.txt"

# The ctest test's script, GPU branch (CI runs it without a GPU).
DLFUSE_CUDA_REQUIRE_GPU=1 cmake -DCLI="$B/bin/dlfuse" -DPLUGIN="$PLUGIN" \
  -P "$ROOT/plugins/cuda/conform_cuda.cmake" >"$OUT/conform.txt" 2>&1 && conform_rc=0 || conform_rc=$?
grep -E "^FAIL|passed, " "$OUT/conform.txt" | head -60 || true
echo "conformance rc=$conform_rc"

if [ "$MODE" != bench ]; then
  if command -v compute-sanitizer >/dev/null; then
    timeout 240 compute-sanitizer --tool memcheck --print-limit 20 "$B/bin/dlfuse" conform "$PLUGIN" --dtype bfloat16 \
      >"$OUT/memcheck.txt" 2>&1 && echo "memcheck rc=0" || echo "memcheck rc=$?"
    grep -E "ERROR SUMMARY|passed, " "$OUT/memcheck.txt" || true
  fi
fi

g++ -O2 -std=c++17 "$ROOT/bench/cuda/bench_cuda.cpp" -I"$ROOT/abi/include" -I"$DLINC" -I"$CUDA_HOME/include" \
  -L"$B/lib" -ldlfuse -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lcudart -lcublasLt -Wl,-rpath,"$B/lib" \
  -o "$B/bench_cuda"
QUICK=""
[ "$MODE" = check ] && QUICK=--quick
"$B/bench_cuda" $QUICK | tee "$OUT/bench_cuda.jsonl"
if [ "$MODE" != check ]; then
  python3 "$ROOT/bench/cuda/torch_peers.py" | tee "$OUT/torch_peers.jsonl"
fi
python3 "$ROOT/bench/cuda/report.py" "$OUT" | tee "$OUT/report.md"
exit $conform_rc
