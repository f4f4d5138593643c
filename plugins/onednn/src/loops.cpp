// The plugin's own one-pass inner loops, each built twice (AVX2 and baseline x86-64) and
// picked at run time by the CPU: the Debian toolchain targets plain x86-64, and these loops
// are memory bound only once they are vectorized. (A plain function-pointer dispatch, not
// GCC's target_clones: an ifunc resolver runs during relocation, before the sanitizer
// runtimes it is instrumented for, and crashes the TSan build.)
#include "loops.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace dlfuse_onednn {
namespace loops {
namespace avx2 {
#define DLFUSE_LOOP_ATTR __attribute__((target("avx2")))
#define DLFUSE_LOOP_AVX2 1
#include "loops_impl.inc"
#undef DLFUSE_LOOP_AVX2
#undef DLFUSE_LOOP_ATTR
}  // namespace avx2
namespace base {
#define DLFUSE_LOOP_ATTR
#include "loops_impl.inc"
#undef DLFUSE_LOOP_ATTR
}  // namespace base

namespace {
bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("avx2"));
  }();
  return yes;
}
}  // namespace

void add_mul(float* pre, const float* x, const float* b, bool b_scalar, const float* y, float m, int64_t n) {
  has_avx2() ? avx2::add_mul(pre, x, b, b_scalar, y, m, n) : base::add_mul(pre, x, b, b_scalar, y, m, n);
}
void relu_select(float* dst, const float* p, const float* g, int64_t n) {
  has_avx2() ? avx2::relu_select(dst, p, g, n) : base::relu_select(dst, p, g, n);
}
void scale(float* dst, const float* src, float m, int64_t n) {
  has_avx2() ? avx2::scale(dst, src, m, n) : base::scale(dst, src, m, n);
}
void accumulate(double* acc, const float* v, int64_t n) {
  has_avx2() ? avx2::accumulate(acc, v, n) : base::accumulate(acc, v, n);
}
double sum(const float* v, int64_t n) { return has_avx2() ? avx2::sum(v, n) : base::sum(v, n); }
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  has_avx2() ? avx2::bf16_to_f32(dst, src, n) : base::bf16_to_f32(dst, src, n);
}
void relu_inplace(float* v, int64_t n) { has_avx2() ? avx2::relu_inplace(v, n) : base::relu_inplace(v, n); }
void stream_copy(float* dst, const float* src, int64_t n) {
  has_avx2() ? avx2::stream_copy(dst, src, n) : base::stream_copy(dst, src, n);
}
void store_fence() {
  if (has_avx2()) _mm_sfence();
}
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  has_avx2() ? avx2::f32_to_bf16(dst, src, n) : base::f32_to_bf16(dst, src, n);
}

}  // namespace loops
}  // namespace dlfuse_onednn
