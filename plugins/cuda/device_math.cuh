// Device-side element conversions and activations shared by the plugin's kernels
// (kernels.cu) and the small-GEMM kernel (small_gemm.cu), so both compute the same function.
#ifndef DLFUSE_CUDA_DEVICE_MATH_CUH_
#define DLFUSE_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfuse/types.h>

namespace dlfuse_cuda {

// ---- element conversion ----------------------------------------------------------------
template <class T> struct Cv;
template <> struct Cv<float> {
  static __device__ __forceinline__ float ld(float v) { return v; }
  static __device__ __forceinline__ float st(float v) { return v; }
};
template <> struct Cv<__half> {
  static __device__ __forceinline__ float ld(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half st(float v) { return __float2half_rn(v); }
};
template <> struct Cv<__nv_bfloat16> {
  static __device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 st(float v) { return __float2bfloat16_rn(v); }
};

template <class T> __device__ __forceinline__ float ldf(const T* p) { return Cv<T>::ld(*p); }
template <class T> __device__ __forceinline__ void stf(T* p, float v) { *p = Cv<T>::st(v); }

// ---- activations (float) ----------------------------------------------------------------
// FAST (16-bit data, whose rounding is 2^-9 / 2^-12): hardware exp and divide, a few ulp
// of float; float32 data uses the accurate functions.
template <bool FAST = false> __device__ __forceinline__ float sigm(float p) {
  if constexpr (FAST) return __fdividef(1.f, 1.f + __expf(-p));
  else return 1.f / (1.f + expf(-p));
}
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

template <bool FAST = false> __device__ __forceinline__ float act_fwd(int act, float p) {
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

}  // namespace dlfuse_cuda

#endif
