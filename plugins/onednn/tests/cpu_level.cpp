// Prints the oneDNN plugin's pointwise kernel level on this CPU, as pointwise_avx512.cpp
// picks it: 0 no AVX-512, 1 AVX-512 (f, bw, vl, dq), 2 also avx512_bf16. Run at configure
// time (CMakeLists.txt): a DLFUSE_ONEDNN_MAX_ISA cap at or above this level runs the
// uncapped kernels again, so those test runs are not registered.
#include <cstdio>

int main() {
  __builtin_cpu_init();
  int level = 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    level = __builtin_cpu_supports("avx512bf16") ? 2 : 1;
  std::printf("%d", level);
  return 0;
}
