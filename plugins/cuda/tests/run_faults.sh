#!/usr/bin/env bash
# The CUDA fault test on a GPU machine (the lent H100: no oneDNN, maybe no GoogleTest):
# builds libdlfuse and the CUDA plugin, compiles tests/faults.cpp against them, runs it,
# then runs it again under compute-sanitizer (leak check, no memory exhaustion there),
# and the plugin's float32 conformance suite.
# Logs go to $OUT (or ./faults-out). Usage: bash plugins/cuda/tests/run_faults.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/faults-out}
mkdir -p "$OUT"
B=${BUILD_DIR:-/tmp/dlfuse-faults}
DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
if [ -z "$DLINC" ] || [ ! -f "$DLINC/dlpack/dlpack.h" ]; then
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1)
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
  DLINC=/tmp/dlpack-inc/tvm_ffi/include
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFUSE_BUILD_TESTS=OFF -DDLFUSE_WITH_ONEDNN=OFF \
    -DDLFUSE_WITH_OPENCL=OFF -DDLFUSE_BUILD_BENCH=OFF -DDLFUSE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DDLPACK_INCLUDE_DIR="$DLINC" >/dev/null &&
    cmake --build "$B" -j "$(nproc)" --target dlfuse dlfuse_cuda dlfuse_cli >/dev/null &&
    g++ -std=c++17 -O1 -g -Wall -Wextra plugins/cuda/tests/faults.cpp -o "$B/faults" -I abi/include -I "$DLINC" \
      -I "$CUDA_HOME/include" -L "$B/lib" -ldlfuse -L "$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$B/lib:$CUDA_HOME/lib64"
} >"$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
PLUGIN=$B/lib/dlfuse/plugins/libdlfuse_cuda.so
echo "=== faults (with memory exhaustion)"
"$B/faults" "$PLUGIN" 2>&1 | tee "$OUT/faults.log"
rc1=${PIPESTATUS[0]}
echo "=== compute-sanitizer --leak-check full (memcheck), --no-exhaust"
CS=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
"$CS" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 1 "$B/faults" "$PLUGIN" --no-exhaust \
  2>&1 | tee "$OUT/sanitizer.log" | tail -25
rc2=${PIPESTATUS[0]}
echo "=== compute-sanitizer, API errors reported (the OOM and bad-device calls are expected to show)"
"$CS" --tool memcheck --leak-check full "$B/faults" "$PLUGIN" --no-exhaust >"$OUT/sanitizer-api.log" 2>&1
echo "rc $?; $(grep -c 'Program hit' "$OUT/sanitizer-api.log") API error reports; tail:"; tail -5 "$OUT/sanitizer-api.log"
echo "=== conformance of the plugin (float32), after the faults"
"$B/bin/dlfuse" conform "$PLUGIN" --dtype float32 >"$OUT/conform.log" 2>&1
rc3=$?
tail -3 "$OUT/conform.log"
echo "faults rc $rc1, compute-sanitizer rc $rc2, conform rc $rc3"
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$rc3" = 0 ]
