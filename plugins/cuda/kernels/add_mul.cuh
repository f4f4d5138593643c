// What the add_mul_activation fast-path kernels share (add_mul_forward.cu,
// add_mul_backward.cu, add_mul_backward_flat.cu): the pre-activation, operand loads by
// mode, the row-gradient stores, and the backward forms' interface to each other.
#ifndef DLFUSE_CUDA_ADD_MUL_CUH_
#define DLFUSE_CUDA_ADD_MUL_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "device_math.cuh"
#include "kernels.h"
#include "vec16.cuh"

namespace dlfuse_cuda {

// The pre-activation of add_mul_activation, (x + b) + mult * y, where b and y may be absent
// (then x alone: the matmul epilogues' pre or out passes through unchanged).
__device__ __forceinline__ float pre_of(float x, float b, bool has_b, float y, bool has_y, float mult) {
  float p = x;
  if (has_b) p = p + b;
  if (has_y) p = p + mult * y;
  return p;
}

// Block: threads over column vectors; blockIdx.y: a chunk of rows. Operands in kRow/kScalar
// mode are read once per thread; kFull ones once per element. U rows are loaded before any
// is computed so that several 16-byte loads per thread are in flight.
constexpr int kUnroll = 2;
constexpr int kFormXYB = 0, kFormPre = 1, kFormOut = 2;

template <class T, int V>
__device__ __forceinline__ void load_hoisted(Pack<T, V>& p, const void* ptr, int mode, int64_t cv) {
  if (mode == kRow)
    p.load(static_cast<const T*>(ptr) + cv * V);
  else if (mode == kScalar)
    p.fill(ldf(static_cast<const T*>(ptr)));
  else if (mode == kAbsent)
    p.fill(0.f);
}

// Column c's sum s into the row-mode gradients (grad_y scaled by the multiplier).
template <class T>
__device__ __forceinline__ void store_row_sums(const AmFast& p, int64_t c, float s) {
  if (p.gxm == kRow) static_cast<T*>(p.gx)[c * p.gx_stride] = Cv<T>::st(s);
  if (p.gym == kRow) static_cast<T*>(p.gy)[c * p.gy_stride] = Cv<T>::st(p.mult * s);
  if (p.gbm == kRow) static_cast<T*>(p.gb)[c * p.gb_stride] = Cv<T>::st(s);
}

// ---- the backward's flat form (add_mul_backward_flat.cu), chosen by am_backward_fast ----

// True when the flat form takes the problem.
bool use_flat(DType dt, const AmFast& p);
// The workspace the flat form needs, in bytes.
size_t flat_workspace(DType dt, const AmFast& p);
// Launches the flat form, which writes the row gradients itself; returns its column sums
// for a scalar gradient's finish (null when there is none).
float* am_backward_flat(DType dt, const AmFast& p, bool reduce, void* workspace, unsigned* zeroed, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif
