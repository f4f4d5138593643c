#!/usr/bin/env bash
# bench/run.py on a GPU machine without package registries (the lent H100): builds
# libdlfuse, the CUDA and OpenCL plugins and the bench driver from source (no oneDNN
# there), then runs the one benchmark command with the NVIDIA OpenCL device only
# (DLFUSE_OPENCL_DEVICE=gpu). Everything lands in $OUT (results.json, results.csv, logs);
# plot where the JSON comes back: python3 bench/plot.py $OUT/results.json.
#   bash bench/gpu_run.sh [--quick]
# Inputs found as tools/gpu_main.sh finds them: DLPack from python3's apache-tvm-ffi, else
# .whl/apache_tvm_ffi-*.whl, else build/h-opencl-carry/include; OpenCL headers/loader from
# the system or the CUDA toolkit, else build/h-opencl-carry.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/dlfuse-bench-out}
B=${BUILD_DIR:-/tmp/dlfuse-bench-build}
CARRY=$ROOT/build/h-opencl-carry
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
if [ -z "$DLINC" ] || [ ! -f "$DLINC/dlpack/dlpack.h" ]; then
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1 || true)
  if [ -n "$whl" ]; then
    python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
    DLINC=/tmp/dlpack-inc/tvm_ffi/include
  else
    DLINC=$CARRY/include
  fi
fi
if [ -f /usr/include/CL/cl.h ]; then CLINC=/usr/include
elif [ -f /usr/local/cuda/include/CL/cl.h ]; then CLINC=/usr/local/cuda/include
else CLINC=$CARRY/include; fi
CLLIB=$(ldconfig -p | awk '/libOpenCL\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$CLLIB" ] || CLLIB=$(ls /usr/local/cuda/lib64/libOpenCL.so.1 2>/dev/null || true)
if [ -z "$CLLIB" ]; then CLLIB=$CARRY/lib/libOpenCL.so.1; export LD_LIBRARY_PATH=$CARRY/lib:${LD_LIBRARY_PATH:-}; fi
if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
  NV=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
  if [ -n "$NV" ]; then
    mkdir -p /tmp/ocl-vendors
    cp /etc/OpenCL/vendors/*.icd /tmp/ocl-vendors/ 2>/dev/null || true
    echo "$NV" >/tmp/ocl-vendors/nvidia.icd
    export OCL_ICD_VENDORS=/tmp/ocl-vendors
  fi
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFUSE_BUILD_TESTS=OFF \
  -DDLFUSE_WITH_ONEDNN=OFF -DDLFUSE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DDLPACK_INCLUDE_DIR="$DLINC" \
  -DOpenCL_INCLUDE_DIR="$CLINC" -DOpenCL_LIBRARY="$CLLIB" >"$OUT/build.log" 2>&1 &&
cmake --build "$B" -j "$(nproc)" --target dlfuse_cuda dlfuse_opencl dlfuse_bench dlfuse_noop >>"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
DLFUSE_OPENCL_DEVICE=${DLFUSE_OPENCL_DEVICE:-gpu} python3 bench/run.py --build "$B" --out "$OUT" --no-build --no-plot "$@" \
  2> >(tee "$OUT/progress.log" >&2) | tee "$OUT/table.txt"
