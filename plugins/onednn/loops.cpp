// The plugin's own one-pass inner loops, each built twice (AVX2 and baseline x86-64) and
// picked at load time by the CPU (GCC target_clones, an ifunc): the Debian toolchain
// targets plain x86-64, and these loops are memory bound only once they are vectorized.
// No FMA is enabled, so x + b + m * y rounds exactly as written, like the reference.
#include "loops.h"

#define DLFUSE_CLONES __attribute__((target_clones("avx2", "default")))

namespace dlfuse_onednn {
namespace loops {

DLFUSE_CLONES void add_mul(float* pre, const float* x, const float* b, bool b_scalar, const float* y, float m,
                           int64_t n) {
  if (b_scalar) {
    const float b0 = b[0];
    for (int64_t j = 0; j < n; ++j) pre[j] = x[j] + b0 + m * y[j];
  } else {
    for (int64_t j = 0; j < n; ++j) pre[j] = x[j] + b[j] + m * y[j];
  }
}

// where(p > 0 or isnan(p), g, 0), written as !(p <= 0) so that it vectorizes to a compare
// and a mask: NaN compares false, so it passes the gradient.
DLFUSE_CLONES void relu_select(float* dst, const float* p, const float* g, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = p[j] <= 0.f ? 0.f : g[j];
}

DLFUSE_CLONES void scale(float* dst, const float* src, float m, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = m * src[j];
}

DLFUSE_CLONES void accumulate(double* acc, const float* v, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += double(v[j]);
}

DLFUSE_CLONES double sum(const float* v, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += double(v[j]);
    s1 += double(v[j + 1]);
    s2 += double(v[j + 2]);
    s3 += double(v[j + 3]);
  }
  for (; j < n; ++j) s0 += double(v[j]);
  return (s0 + s1) + (s2 + s3);
}

DLFUSE_CLONES void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t u = uint32_t(src[j]) << 16;
    __builtin_memcpy(&dst[j], &u, 4);
  }
}

DLFUSE_CLONES void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u;
    __builtin_memcpy(&u, &src[j], 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest even; overflow gives Inf
    const uint32_t nan = (u >> 16) | 0x40u;                          // NaN stays a quiet NaN
    dst[j] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace loops
}  // namespace dlfuse_onednn
