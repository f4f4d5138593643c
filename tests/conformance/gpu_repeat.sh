#!/usr/bin/env bash
# The hardened conformance suite, N times over, on a GPU machine: the CUDA plugin and the
# OpenCL plugin (every OpenCL device: NVIDIA's and PoCL's CPU device), each run with a new
# random seed (printed in the log's header) and a longer sweep, plus the stale-scratch
# regression cases 64 times each. Nothing here needs a network.
#
#   bash tests/conformance/gpu_repeat.sh [BUILD_DIR] [N]     (defaults: build/cuda 20)
#
# Build first with the cuda preset (cmake --preset cuda && cmake --build --preset cuda).
# Logs go to $BUILD_DIR/conform-repeat/; the last line says how many runs failed, and every
# failing row is printed with the seed that reproduces it:
#   $BUILD_DIR/bin/dlfuse conform <plugin> --seed <S> --sweep 64 --op <op> --case <case>
set -u
b=${1:-build/cuda}
n=${2:-20}
out=$b/conform-repeat
mkdir -p "$out"
export POCL_CACHE_DIR=$b/plugins/opencl/pocl-cache
failed=0
for i in $(seq 1 "$n"); do
  for p in cuda opencl; do
    so=$b/lib/dlfuse/plugins/libdlfuse_$p.so
    log=$out/$p-$i.log
    "$b/bin/dlfuse" conform "$so" --seed random --sweep 64 > "$log" 2>&1
    rc=$?
    "$b/bin/dlfuse" conform "$so" --op add_mul_activation_backward --case rows_chunks --repeat 64 \
      --sweep 0 --threads 0 --no-bad-inputs >> "$log" 2>&1 || rc=1
    seed=$(grep -m1 -o 'seed [0-9]*' "$log")
    if [ "$rc" -ne 0 ]; then
      failed=$((failed + 1))
      echo "== $p run $i ($seed): FAILED"
      grep -A2 '^FAIL' "$log" | head -20
    else
      echo "== $p run $i ($seed): $(tail -1 "$log")"
    fi
  done
done
echo "$failed of $((2 * n)) runs failed; logs in $out"
[ "$failed" -eq 0 ]
