#!/usr/bin/env bash
# The main job on a GPU machine that has no package registry (the lent H100): build
# libdlfuse, the CLI and the CUDA and OpenCL plugins (no oneDNN there), then discover them,
# run both ops forward and backward on every available device and dtype, check each
# against the float64 reference and print the table. Where a registry is reachable,
# tools/main.sh is the command; this one only finds its inputs differently:
#   DLPack header  python3's apache-tvm-ffi, else .whl/apache_tvm_ffi-*.whl, else $CARRY/include
#   OpenCL         the system's headers and ICD loader, else $CARRY (include/CL, lib/libOpenCL.so.1);
#                  an installed NVIDIA ICD that no vendors file names is registered for this run only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=${CARRY:-$ROOT/build/h-opencl-carry}
B=${BUILD_DIR:-/tmp/dlfuse-gpu-main}

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
cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DDLFUSE_BUILD_TESTS=OFF \
  -DDLFUSE_WITH_ONEDNN=OFF -DDLFUSE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DDLPACK_INCLUDE_DIR="$DLINC" \
  -DOpenCL_INCLUDE_DIR="$CLINC" -DOpenCL_LIBRARY="$CLLIB" >/dev/null
cmake --build "$B" -j "$(nproc)" >/dev/null
"$B/bin/dlfuse" list
"$B/bin/dlfuse" run all
