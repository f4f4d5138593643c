# Sourced by tools/gpu.sh: finds what a GPU machine without package registries offers, the
# same way for every job, and defines gpu_build. Sets DLINC, CUTLASS_ARG, CLINC, CLLIB, CUDA_HOME,
# CLI and PLUGINS (after gpu_build), and OCL_ICD_VENDORS where the NVIDIA ICD is not registered.
ROOT=${ROOT:-$PWD}

# DLPack >= 1.0: python3's apache-tvm-ffi, else a carried wheel.
DLINC=$(python3 -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())" 2>/dev/null || true)
if [ -z "$DLINC" ] || [ ! -f "$DLINC/dlpack/dlpack.h" ]; then
  whl=$(ls "$ROOT"/.whl/apache_tvm_ffi-*.whl 2>/dev/null | head -1 || true)
  if [ -n "$whl" ]; then
    # Extracted once per wheel (the marker names it): a fresh copy's new mtime would rebuild
    # everything that includes it, in every later gpu.sh call on a kept build folder.
    if [ "$(cat /tmp/dlpack-inc/.from 2>/dev/null)" != "$(basename "$whl")" ]; then
      python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extract('tvm_ffi/include/dlpack/dlpack.h', '/tmp/dlpack-inc')" "$whl"
      basename "$whl" >/tmp/dlpack-inc/.from
    fi
    DLINC=/tmp/dlpack-inc/tvm_ffi/include
  else
    echo "gpu_env: no DLPack header: pip-install apache-tvm-ffi or carry .whl/apache_tvm_ffi-*.whl" >&2
  fi
fi

# CUTLASS (the CUDA plugin's fused mlp_backward epilogue): python3's nvidia-cutlass, else a
# carried .whl/nvidia_cutlass-*.whl's headers.
CUTLASS_ARG=()
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)" 2>/dev/null; then
  whl=$(ls "$ROOT"/.whl/nvidia_cutlass-*.whl 2>/dev/null | head -1 || true)
  if [ -n "$whl" ]; then
    # Extracted once per wheel, for the same reason.
    if [ "$(cat /tmp/cutlass-inc/.from 2>/dev/null)" != "$(basename "$whl")" ]; then
      rm -rf /tmp/cutlass-inc && mkdir -p /tmp/cutlass-inc
      python3 -c "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); z.extractall('/tmp/cutlass-inc', [n for n in z.namelist() if n.startswith('cutlass_library/source/include/')])" "$whl"
      basename "$whl" >/tmp/cutlass-inc/.from
    fi
    CUTLASS_ARG=(-DDLFUSE_CUTLASS_INCLUDE=/tmp/cutlass-inc/cutlass_library/source/include)
  fi
fi

# OpenCL: the system's headers and ICD loader, else the CUDA toolkit's.
if [ -f /usr/include/CL/cl.h ]; then CLINC=/usr/include; else CLINC=/usr/local/cuda/include; fi
CLLIB=$(ldconfig -p | awk '/libOpenCL\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$CLLIB" ] || CLLIB=/usr/local/cuda/lib64/libOpenCL.so.1
if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
  nv=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1/ {print $NF; exit}')
  if [ -n "$nv" ]; then
    mkdir -p /tmp/ocl-vendors
    cp /etc/OpenCL/vendors/*.icd /tmp/ocl-vendors/ 2>/dev/null || true
    echo "$nv" >/tmp/ocl-vendors/nvidia.icd
    export OCL_ICD_VENDORS=/tmp/ocl-vendors
  fi
fi

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")

# gpu_build DIR [SRC TARGET...]: configure this tree into DIR with everything but oneDNN and
# the GoogleTest unit tests (the test plugins are built: the Python suite runs on testref's
# CPU kernels too), and build it; or, for a baseline, the tree SRC without tests, building
# only TARGETs. GPU_CMAKE_ARGS (an array) adds configure arguments.
GPU_CMAKE_ARGS=()
gpu_build() {
  local dir=$1 src=${2:-$ROOT} gen=() arch=() targets=() extra=()
  (($# > 2)) && targets=(--target "${@:3}") && extra=(-DDLFUSE_BUILD_TESTS=OFF)
  command -v ninja >/dev/null && gen=(-G Ninja)
  [ -n "${CUDA_ARCHS:-}" ] && arch=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
  cmake -S "$src" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLFUSE_BUILD_UNIT_TESTS=OFF \
    -DDLFUSE_WITH_ONEDNN=OFF -DDLFUSE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" "${arch[@]}" "${extra[@]}" \
    "${CUTLASS_ARG[@]}" -DDLPACK_INCLUDE_DIR="$DLINC" -DOpenCL_INCLUDE_DIR="$CLINC" -DOpenCL_LIBRARY="$CLLIB" \
    "${GPU_CMAKE_ARGS[@]}" &&
    cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
  local rc=$?
  if (($# < 2)); then
    CLI=$dir/bin/dlfuse
    PLUGINS=$dir/lib/dlfuse/plugins
  fi
  return $rc
}
