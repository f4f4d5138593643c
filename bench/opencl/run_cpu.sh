#!/usr/bin/env bash
# CPU comparison on the build machine: the OpenCL plugin on PoCL vs oneDNN 2.6 f32 matmul
# (bias + relu post-op), both in one process (bench_gemm --onednn), ROUNDS times with the
# load average logged, since other jobs share the machine. Usage (repo root):
#   bash bench/opencl/run_cpu.sh [BUILD_DIR] [ROUNDS]      (BUILD_DIR has the plugin built)
set -eu
B=${1:-build/h-opencl}
ROUNDS=${2:-3}
DL=$(grep DLPACK_INCLUDE_DIR: "$B/CMakeCache.txt" | cut -d= -f2)
g++ -O2 -std=c++17 -DBENCH_WITH_DNNL -Iabi/include -I"$DL" bench/opencl/bench_gemm.cpp -o "$B/bench_gemm" \
  -L"$B/lib" -ldlfuse -ldnnl -Wl,-rpath,"$PWD/$B/lib"
echo "# $(date -u) $(uname -n) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) nproc=$(nproc)"
clinfo -l 2>/dev/null | sed 's/^/# /'
for r in $(seq 1 "$ROUNDS"); do
  echo "# round $r loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  "$B/bench_gemm" --plugin "$B/lib/dlfuse/plugins/libdlfuse_opencl.so" --shapes 2048x512x256,4096x1024x1024 \
    --reps 5 --onednn 2>&1 | grep RESULT
done
echo "# end loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
