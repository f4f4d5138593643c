// Device-side element conversions, activations and their gradients, shared by every kernel
// file (the elementwise kernels and the small-GEMM kernel), so all compute the same function.
#ifndef DLFUSE_CUDA_DEVICE_MATH_CUH_
#define DLFUSE_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfuse/types.h>

namespace dlfuse_cuda {

// ---- element conversion ----------------------------------------------------------------
template <class T>
struct Cv;
template <>
struct Cv<float> {
  static __device__ __forceinline__ float ld(float v) { return v; }
  static __device__ __forceinline__ float st(float v) { return v; }
};
template <>
struct Cv<__half> {
  static __device__ __forceinline__ float ld(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half st(float v) { return __float2half_rn(v); }
};
template <>
struct Cv<__nv_bfloat16> {
  static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 st(float v) { return __float2bfloat16_rn(v); }
};

template <class T>
__device__ __forceinline__ float ldf(const T* p) {
  return Cv<T>::ld(*p);
}
template <class T>
__device__ __forceinline__ void stf(T* p, float v) {
  *p = Cv<T>::st(v);
}

// ---- activations (float) ----------------------------------------------------------------
// FAST (16-bit data, whose rounding is 2^-9 / 2^-12): hardware exp and divide, a few ulp
// of float; float32 data uses the accurate functions.
template <bool FAST = false>
__device__ __forceinline__ float sigm(float p) {
  if constexpr (FAST)
    return __fdividef(1.f, 1.f + __expf(-p));
  else
    return 1.f / (1.f + expf(-p));
}
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

template <bool FAST = false>
__device__ __forceinline__ float act_fwd(int act, float p) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return (p > 0.f || p != p) ? p : 0.f;  // NaN stays NaN
    case DLFUSE_ACT_SIGMOID: return sigm<FAST>(p);
    case DLFUSE_ACT_TANH: return tanhf(p);
    case DLFUSE_ACT_GELU_ERF: return p * normcdff(p);
    case DLFUSE_ACT_GELU_TANH: {
      // 0.5 p (1 + tanh u) = p sigmoid(2u): no cancellation for negative p.
      const float u = kSqrt2OverPi * (p + kGeluC * p * p * p);
      return p * sigm<FAST>(2.f * u);
    }
    default: return p * sigm<FAST>(p);  // SILU
  }
}

// ---- activation gradients (float) ----------------------------------------------------------
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// grad * act'(p); relu is a select so a NaN/Inf grad where p <= 0 gives exactly 0.
template <bool FAST = false>
__device__ __forceinline__ float act_bwd(int act, float p, float g) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return g;
    case DLFUSE_ACT_RELU: return (p > 0.f || p != p) ? g : 0.f;
    case DLFUSE_ACT_SIGMOID: return g * (sigm<FAST>(p) * sigm<FAST>(-p));
    case DLFUSE_ACT_TANH: {
      // 1 - tanh^2 p = 4 e / (1 + e)^2, e = exp(-2|p|): accurate in the tails.
      const float e = expf(-2.f * fabsf(p));
      const float d = 1.f + e;
      return g * (4.f * e / (d * d));
    }
    case DLFUSE_ACT_GELU_ERF: {
      const float pdf = expf(-0.5f * p * p) * kInvSqrt2Pi;
      return g * (normcdff(p) + p * pdf);
    }
    case DLFUSE_ACT_GELU_TANH: {
      // 0.5(1 + tanh u) = s, 1 - tanh^2 u = 4 s (1 - s), s = sigmoid(2u).
      const float u = kSqrt2OverPi * (p + kGeluC * p * p * p);
      const float s = sigm<FAST>(2.f * u), sc = sigm<FAST>(-2.f * u);
      const float du = kSqrt2OverPi * (1.f + 3.f * kGeluC * p * p);
      const float sech2 = s * sc;
      // |p| > ~1.8e19 makes du Inf where sech2 is already 0: the term is 0, not 0 * Inf.
      return g * (s + (sech2 == 0.f ? 0.f : 2.f * p * sech2 * du));
    }
    default: {  // SILU
      const float s = sigm<FAST>(p), sc = sigm<FAST>(-p);
      return g * (s + p * s * sc);
    }
  }
}

// grad * act'(p) from the activation's output o (IDENTITY, RELU, SIGMOID, TANH: their
// derivative is a function of o); the other activations never reach here (the registry
// refuses their out form).
__device__ __forceinline__ float act_bwd_out(int act, float o, float g) {
  switch (act) {
    case DLFUSE_ACT_RELU: return (o > 0.f || o != o) ? g : 0.f;
    case DLFUSE_ACT_SIGMOID: return g * (o * (1.f - o));
    case DLFUSE_ACT_TANH: return g * (1.f - o * o);
    default: return g;  // IDENTITY
  }
}

template <bool FROM_OUT, bool FAST>
__device__ __forceinline__ float act_grad_of(int act, float v, float g) {
  if constexpr (FROM_OUT)
    return act_bwd_out(act, v, g);
  else
    return act_bwd<FAST>(act, v, g);
}

}  // namespace dlfuse_cuda

#endif
