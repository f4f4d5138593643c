// add_mul_activation's one-pass kernels for CPUs with AVX-512 (pointwise_avx512.cpp):
// float32, bfloat16 and float16 tensors read and written in their own dtype, computed in
// float32 registers, every array streamed once. Callers check usable() first and pass
// compact layouts only (add_mul_fast.cpp classifies them).
#ifndef DLFUSE_ONEDNN_POINTWISE_AVX512_H_
#define DLFUSE_ONEDNN_POINTWISE_AVX512_H_

#include <cstdint>

namespace dlfuse_onednn {
namespace avx512 {

enum class Elem { kF32, kBF16, kF16 };
// How a bias (or grad_bias) spans the [rows, n] tensor: a row over n, one value, or full.
enum class Span { kRow, kScalar, kFull };

// Every tensor is compact [rows, n] unless its Span says otherwise; NULL outputs are not
// written. The forward reads x, y, bias and writes out; the backward reads g and either
// out_in (from_out) or x, y, bias, and writes gx = d, gy = mult * d and gb = reduce(d).
struct AddMul {
  Elem elem = Elem::kF32;
  int64_t rows = 0, n = 0;
  float mult = 1.f;
  int act = 0;  // forward, backward: IDENTITY, RELU; from out also SIGMOID, TANH
  const void *x = nullptr, *y = nullptr, *bias = nullptr;
  Span bias_span = Span::kRow;
  const void *g = nullptr, *out_in = nullptr;
  void *out = nullptr, *gx = nullptr, *gy = nullptr, *gb = nullptr;
  Span gb_span = Span::kRow;
};

// True on a CPU with AVX-512 F, BW, VL and DQ (and the OS saving zmm state), unless
// DLFUSE_ONEDNN_MAX_ISA caps the plugin below it ("avx2" or "none"; "avx512_core" keeps
// AVX-512 but converts bfloat16 with shifts where avx512_bf16 would be used).
bool usable();
// Which conversion bfloat16 stores use: the avx512_bf16 instruction or integer shifts.
bool native_bf16();

void forward(const AddMul& a);
void backward(const AddMul& a, bool from_out);

}  // namespace avx512
}  // namespace dlfuse_onednn

#endif
