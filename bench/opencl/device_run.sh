#!/usr/bin/env bash
# One job on the GPU machine (an H100 with the NVIDIA OpenCL platform and PoCL):
#   1. report what OpenCL the machine has, 2. build libdlfuse + the OpenCL plugin + the CLI,
#   3. conformance on every OpenCL device, one device at a time (DLFUSE_OPENCL_DEVICE),
#   4. GEMM GFLOP/s of the plugin on the GPU and, in the same job, cuBLAS fp32 via torch.
# Usage (repo root): bash bench/opencl/device_run.sh [SHAPES]
# Logs go to $OUT (default /tmp/dlfuse-opencl-out). Needs: cmake, a C++17 compiler, python3
# with torch for the cuBLAS reference. Headers/loader it cannot find on the machine are
# taken from build/h-opencl-carry (include/CL, include/dlpack, lib/libOpenCL.so.1).
set -u
OUT=${OUT:-/tmp/dlfuse-opencl-out}
mkdir -p "$OUT"
ROOT=$(pwd)
CARRY=$ROOT/build/h-opencl-carry
B=${BUILD_DIR:-/tmp/b-opencl}
SHAPES=${1:-2048x512x256,4096x1024x1024,8192x4096x4096}
log() { echo "== $*"; }

{
  log env; date -u; uname -m; nproc
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  log icd; ls -la /etc/OpenCL/vendors/ 2>&1; cat /etc/OpenCL/vendors/*.icd 2>&1
  log loaders; ldconfig -p | grep -iE "opencl|pocl" ; find / -xdev -name "libnvidia-opencl*" 2>/dev/null | head -3
  log headers; ls /usr/include/CL/cl.h /usr/local/cuda/include/CL/cl.h 2>&1
  log dlpack; python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>&1 | tail -1
  log tools; which cmake ninja g++ clinfo 2>&1; cmake --version | head -1
} > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

# Headers: the system's, else the CUDA toolkit's, else the carried Khronos ones.
if [ -f /usr/include/CL/cl.h ]; then CLINC=/usr/include
elif [ -f /usr/local/cuda/include/CL/cl.h ]; then CLINC=/usr/local/cuda/include
else CLINC=$CARRY/include; fi
# The ICD loader: the system's libOpenCL.so.1, else the carried Debian ocl-icd.
CLLIB=$(ldconfig -p | awk '/libOpenCL\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$CLLIB" ] || CLLIB=$(ls /usr/local/cuda/lib64/libOpenCL.so.1 2>/dev/null || true)
if [ -z "$CLLIB" ]; then CLLIB=$CARRY/lib/libOpenCL.so.1; export LD_LIBRARY_PATH=$CARRY/lib:${LD_LIBRARY_PATH:-}; fi
# An NVIDIA ICD that no vendors file names: register it for this job only.
if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
  NV=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
  if [ -n "$NV" ]; then
    mkdir -p /tmp/ocl-vendors; cp /etc/OpenCL/vendors/*.icd /tmp/ocl-vendors/ 2>/dev/null
    echo "$NV" > /tmp/ocl-vendors/nvidia.icd; export OCL_ICD_VENDORS=/tmp/ocl-vendors
  fi
fi
DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
[ -n "$DLINC" ] && [ -f "$DLINC/dlpack/dlpack.h" ] || DLINC=$CARRY/include
echo "CLINC=$CLINC CLLIB=$CLLIB DLINC=$DLINC OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-}" | tee -a "$OUT/env.log"

log build
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DDLFUSE_WITH_ONEDNN=OFF -DDLFUSE_WITH_CUDA=OFF \
  -DDLFUSE_BUILD_TESTS=OFF -DDLPACK_INCLUDE_DIR="$DLINC" -DOpenCL_INCLUDE_DIR="$CLINC" -DOpenCL_LIBRARY="$CLLIB" \
  > "$OUT/build.log" 2>&1 &&
  cmake --build "$B" -j "$(nproc)" --target dlfuse_cli dlfuse_opencl >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
PLUGIN=$B/lib/dlfuse/plugins/libdlfuse_opencl.so
CLI=$B/bin/dlfuse
g++ -O2 -std=c++17 -I abi/include -I "$DLINC" bench/opencl/bench_gemm.cpp -o "$B/bench_gemm" -L "$B/lib" -ldlfuse \
  -Wl,-rpath,"$B/lib" >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }

log devices
DLFUSE_OPENCL_VERBOSE=1 DLFUSE_PLUGIN_PATH=$PLUGIN "$CLI" list 2>&1 | tee -a "$OUT/env.log" | head -30
NDEV=$(DLFUSE_PLUGIN_PATH=$PLUGIN "$CLI" list 2>/dev/null | grep -oE "opencl x[0-9]+" | grep -oE "[0-9]+" | head -1)
echo "devices: ${NDEV:-?}"

log conformance
for i in $(seq 0 $(( ${NDEV:-2} - 1 ))); do
  echo "-- DLFUSE_OPENCL_DEVICE=$i"
  # The GPU's program binary (PTX on NVIDIA) comes back for inspection (ptxas -v).
  DUMP=""; [ "$i" = 0 ] && DUMP=$OUT/prog$i
  DLFUSE_OPENCL_DEVICE=$i DLFUSE_OPENCL_DUMP_BINARY=$DUMP timeout 300 "$CLI" conform "$PLUGIN" \
    > "$OUT/conform$i.log" 2>&1
  echo "exit $?"; grep -E "^# plugin|passed," "$OUT/conform$i.log"; grep -E "^FAIL" -A1 "$OUT/conform$i.log" | head -20
done
# float16 forced on the GPU (NVIDIA does not report cl_khr_fp16; the kernels use only the
# core vload_half/vstore_half), so the NVIDIA compiler's half path is checked too.
echo "-- DLFUSE_OPENCL_DEVICE=0 DLFUSE_OPENCL_FP16=force --dtype float16"
DLFUSE_OPENCL_DEVICE=0 DLFUSE_OPENCL_FP16=force timeout 300 "$CLI" conform "$PLUGIN" --dtype float16 > "$OUT/conform0_f16.log" 2>&1
echo "exit $?"; grep -E "passed," "$OUT/conform0_f16.log"; grep -E "^FAIL" -A1 "$OUT/conform0_f16.log" | head -20

log bench
{
  DLFUSE_OPENCL_DEVICE=gpu "$B/bench_gemm" --plugin "$PLUGIN" --shapes "$SHAPES" --reps 20
  # The tile choice's alternatives, for the record.
  DLFUSE_OPENCL_DEVICE=gpu DLFUSE_OPENCL_GEMM=tiled128 "$B/bench_gemm" --plugin "$PLUGIN" --shapes 2048x512x256 --reps 20 |
    sed 's/impl=opencl/impl=opencl-force-tile128/'
  DLFUSE_OPENCL_DEVICE=gpu DLFUSE_OPENCL_GEMM=tiled64 "$B/bench_gemm" --plugin "$PLUGIN" --shapes 4096x1024x1024 --reps 20 |
    sed 's/impl=opencl/impl=opencl-force-tile64/'
  python3 bench/opencl/torch_sgemm.py "$SHAPES" 20
  DLFUSE_OPENCL_DEVICE=cpu "$B/bench_gemm" --plugin "$PLUGIN" --shapes 2048x512x256,4096x1024x1024 --reps 5 |
    sed 's/impl=opencl/impl=opencl-pocl-host-cpu/'
} 2>&1 | tee "$OUT/bench.log"
