#!/usr/bin/env bash
# Every job on a GPU machine that has no package registry (the lent H100/H200), through one
# build: libdlfuse, the CLI, the CUDA and OpenCL plugins and the bench targets (no oneDNN).
#
#   bash tools/gpu.sh JOB...        e.g. bash tools/gpu.sh main conform bench
#
# Jobs (each logs to $LOGS/<job>/, summary lines to $LOGS/summary.txt):
#   main           dlfuse list + run both ops fwd+bwd on every device and dtype (the README's main job)
#   conform[=N]    the conformance suite N times (default 1) on the CUDA plugin and on every
#                  OpenCL device, one at a time (NVIDIA OpenCL, PoCL), plus forced float16 on the GPU
#   memcheck       compute-sanitizer memcheck over the CUDA plugin's bfloat16 conformance
#   bench[=ARGS]   bench/run.py: every plugin and peer (cuBLASLt, PyTorch), ceilings, dispatch;
#                  ARGS are run.py's options, e.g. bench="--quick --plugins cuda --ops matmul_add_relu"
#   python         bindings/python/tools/gpu_job.sh over this build (pytest with CUDA, benches, DLRM)
# When $OUT is set (the device tool), everything is packed into $OUT/gpu-logs.tgz at the end.
#
# Inputs are found the same way for every job (tools/gpu_env.sh): the DLPack header from
# python3's apache-tvm-ffi or a carried .whl/apache_tvm_ffi-*.whl; OpenCL headers and loader
# from the system or the CUDA toolkit; an NVIDIA ICD that no vendors file names is registered
# for this run only. CUDA_ARCHS overrides the CUDA architectures (default: the project's).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=${LOGS:-/tmp/dlfuse-gpu-logs}
B=${BUILD_DIR:-/tmp/dlfuse-gpu-build}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
source tools/gpu_env.sh
summary() { echo "$*" | tee -a "$LOGS/summary.txt"; }

job_main() {
  "$CLI" list && "$CLI" run all
}

job_conform() {
  local n=${1:-1} rc=0 ndev i r
  for r in $(seq 1 "$n"); do
    DLFUSE_CUDA_REQUIRE_GPU=1 cmake -DCLI="$CLI" -DPLUGIN="$PLUGINS/libdlfuse_cuda.so" \
      -P plugins/cuda/conform_cuda.cmake >"$J/cuda.$r.log" 2>&1 || { rc=1; summary "conform cuda run $r FAILED"; }
    ndev=$(DLFUSE_PLUGIN_PATH=$PLUGINS/libdlfuse_opencl.so "$CLI" list 2>/dev/null | grep -oE "opencl x[0-9]+" | grep -oE "[0-9]+" | head -1)
    for i in $(seq 0 $(( ${ndev:-1} - 1 ))); do
      DLFUSE_OPENCL_DEVICE=$i timeout 600 "$CLI" conform "$PLUGINS/libdlfuse_opencl.so" >"$J/opencl$i.$r.log" 2>&1 ||
        { rc=1; summary "conform opencl device $i run $r FAILED"; }
    done
    # NVIDIA does not report cl_khr_fp16; the kernels use only core vload_half/vstore_half.
    DLFUSE_OPENCL_DEVICE=0 DLFUSE_OPENCL_FP16=force timeout 600 "$CLI" conform "$PLUGINS/libdlfuse_opencl.so" \
      --dtype float16 >"$J/opencl0_f16.$r.log" 2>&1 || { rc=1; summary "conform opencl f16 run $r FAILED"; }
  done
  for f in "$J"/*.1.log; do summary "$(basename "$f" .1.log): $(grep -hE 'passed, [0-9]+ failed' "$f" | tail -1)"; done
  return $rc
}

job_memcheck() {
  timeout 500 compute-sanitizer --tool memcheck --print-limit 20 "$CLI" conform "$PLUGINS/libdlfuse_cuda.so" \
    --dtype bfloat16 >"$J/memcheck.txt" 2>&1
  local rc=$?
  grep -E "ERROR SUMMARY|passed, " "$J/memcheck.txt"
  return $rc
}

job_bench() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
  DLFUSE_OPENCL_DEVICE=${DLFUSE_OPENCL_DEVICE:-gpu} python3 bench/run.py --build "$B" --out "$J" --no-build --no-plot "$@" \
    2>"$J/progress.log" | tee "$J/table.txt"
}

job_python() {
  OUT=$J bash bindings/python/tools/gpu_job.sh "$B"
}

rc=0
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  jobs: $*"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
} | tee -a "$LOGS/summary.txt"
t0=$(date +%s)
if gpu_build "$B" >"$LOGS/build.log" 2>&1; then
  summary "build: $(($(date +%s) - t0)) s"
  for arg in "$@"; do
    name=${arg%%=*}
    val=""; [ "$name" != "$arg" ] && val=${arg#*=}
    if ! declare -F "job_$name" >/dev/null; then summary "unknown job: $name"; rc=2; continue; fi
    J=$LOGS/$name
    mkdir -p "$J"
    t1=$(date +%s)
    "job_$name" $val >"$J/out.log" 2>&1
    jrc=$?
    ((jrc == 0)) || rc=1
    summary "job $name: exit $jrc, $(($(date +%s) - t1)) s"
  done
else
  summary "build FAILED"; tail -40 "$LOGS/build.log"; rc=1
fi
if [ -n "${OUT:-}" ]; then tar -C "$LOGS" -czf "$OUT/gpu-logs.tgz" . && cp "$LOGS/summary.txt" "$OUT/"; fi
exit $rc
