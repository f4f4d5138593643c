// Vectorized inner loops of the plugin (loops.cpp): contiguous spans of n elements.
#ifndef DLFUSE_ONEDNN_LOOPS_H_
#define DLFUSE_ONEDNN_LOOPS_H_

#include <cstdint>

namespace dlfuse_onednn {
namespace loops {

// pre = x + b + m * y; b is a span of n, or one value when b_scalar.
void add_mul(float* pre, const float* x, const float* b, bool b_scalar, const float* y, float m, int64_t n);
// dst = where(p > 0 or isnan(p), g, 0)
void relu_select(float* dst, const float* p, const float* g, int64_t n);
void scale(float* dst, const float* src, float m, int64_t n);
void accumulate(double* acc, const float* v, int64_t n);
double sum(const float* v, int64_t n);
// v = relu(v) in place, NaN kept.
void relu_inplace(float* v, int64_t n);
// dst = src with streaming (non-temporal) stores; call store_fence() before the data is
// handed to another thread or back to the caller.
void stream_copy(float* dst, const float* src, int64_t n);
void store_fence();
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n);
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n);

}  // namespace loops
}  // namespace dlfuse_onednn

#endif
