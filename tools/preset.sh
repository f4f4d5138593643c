# plain_preset: the build of every plugin this machine can compile. The CUDA plugin needs
# only the toolkit (nvcc at /usr/local/cuda), not a GPU.
plain_preset() {
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo cuda
  else
    echo "note: /usr/local/cuda/bin/nvcc not found: building without the CUDA plugin" >&2
    echo cpu
  fi
}
