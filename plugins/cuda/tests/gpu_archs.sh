#!/usr/bin/env bash
# On a GPU machine (the lent H100): the CUDA plugin as shipped, built with the default
# architectures (every generation from sm_75, docs/cuda.md), must hold that device code,
# be listed available, pass conformance, the large-reduction check and the fault test.
# Then (MODE=bench) the plugin's bench (bench/cuda/run.sh bench) on this tree (SIDE=head)
# or on BASE (SIDE=base; a git revision, default origin/main or main), to show the
# timings unchanged within noise. Logs to $OUT (or ./archs-out).
#   usage: [MODE=check|bench] [SIDE=head|base] [BASE=rev] bash plugins/cuda/tests/gpu_archs.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/archs-out}
MODE=${MODE:-check}
mkdir -p "$OUT"
B=${BUILD_DIR:-/tmp/dlfuse-archs}
DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
if [ -z "$DLINC" ] || [ ! -f "$DLINC/dlpack/dlpack.h" ]; then
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1)
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
  DLINC=/tmp/dlpack-inc/tvm_ffi/include
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv | tee "$OUT/gpus.txt"
# No -DCMAKE_CUDA_ARCHITECTURES: the default list is what is under test.
start=$(date +%s)
{
  cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFUSE_BUILD_TESTS=OFF -DDLFUSE_WITH_ONEDNN=OFF \
    -DDLFUSE_WITH_OPENCL=OFF -DDLFUSE_BUILD_BENCH=OFF -DDLFUSE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DDLPACK_INCLUDE_DIR="$DLINC" &&
    cmake --build "$B" -j "$(nproc)" --target dlfuse dlfuse_cuda dlfuse_cli &&
    g++ -std=c++17 -O1 -g plugins/cuda/tests/large_reduce.cpp -o "$B/large_reduce" -I abi/include -I "$DLINC" \
      -L "$B/lib" -ldlfuse -Wl,-rpath,"$B/lib" &&
    g++ -std=c++17 -O1 -g plugins/cuda/tests/faults.cpp -o "$B/faults" -I abi/include -I "$DLINC" \
      -I "$CUDA_HOME/include" -L "$B/lib" -ldlfuse -L "$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$B/lib:$CUDA_HOME/lib64"
} >"$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
echo "build (default architectures, -j$(nproc)): $(( $(date +%s) - start )) s"
grep "CMAKE_CUDA_ARCHITECTURES:" "$B/CMakeCache.txt"
PLUGIN=$B/lib/dlfuse/plugins/libdlfuse_cuda.so
ARCHS=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$B/CMakeCache.txt")
LISTER=$(command -v cuobjdump || echo "$CUDA_HOME/bin/cuobjdump")
[ -x "$LISTER" ] || LISTER="python3;$ROOT/plugins/cuda/tests/list_device_code.py"
cmake "-DLISTER=$LISTER" -DPLUGIN="$PLUGIN" "-DARCHS=$ARCHS" -P plugins/cuda/tests/device_code.cmake; rc0=$?
unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER
"$B/bin/dlfuse" list | tee "$OUT/list.txt"
grep -Eq "^cuda +[^ ]+ +available +cuda x[1-9]" "$OUT/list.txt"; rc1=$?
DLFUSE_CUDA_REQUIRE_GPU=1 cmake -DCLI="$B/bin/dlfuse" -DPLUGIN="$PLUGIN" -P plugins/cuda/conform_cuda.cmake \
  >"$OUT/conform.txt" 2>&1; rc2=$?
grep -E "^FAIL|passed, " "$OUT/conform.txt" | head -20
"$B/large_reduce" "$PLUGIN" >"$OUT/large_reduce.txt" 2>&1; rc3=$?
"$B/faults" "$PLUGIN" >"$OUT/faults.txt" 2>&1; rc4=$?
tail -2 "$OUT/large_reduce.txt" "$OUT/faults.txt"
echo "device_code rc $rc0, listed available rc $rc1, conform rc $rc2, large_reduce rc $rc3, faults rc $rc4"
[ "$MODE" = bench ] || { [ "$rc0$rc1$rc2$rc3$rc4" = 00000 ]; exit; }

# Bench, one side a call (each `bench/cuda/run.sh bench` takes minutes): SIDE=head is this
# tree, SIDE=base the revision BASE. Run base, head, base, head so drift shows as drift.
SIDE=${SIDE:-head}
src=$ROOT
if [ "$SIDE" = base ]; then
  BASE=${BASE:-$(git rev-parse --verify -q origin/main || git rev-parse --verify -q main)}
  rm -rf /tmp/dlfuse-base && mkdir -p /tmp/dlfuse-base && git archive "$BASE" | tar -x -C /tmp/dlfuse-base
  cp -r "$ROOT"/.whl /tmp/dlfuse-base/ 2>/dev/null || true
  src=/tmp/dlfuse-base
fi
n=$(ls -d "$OUT"/bench-"$SIDE"-* 2>/dev/null | wc -l)
dest=$OUT/bench-$SIDE-$((n + 1))
OUT=$dest BUILD_DIR=/tmp/b-bench-$SIDE bash "$src/bench/cuda/run.sh" bench >"$dest.log" 2>&1
echo "bench $SIDE rc $? -> $dest/report.md"
