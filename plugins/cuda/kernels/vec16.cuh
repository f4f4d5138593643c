// 16-byte vector access for the elementwise kernels: V elements of T at once (V = 16 /
// sizeof(T)), or one (V = 1) where the data is not aligned for vectors. Loads and stores
// stream (evict first) unless the caller says the data is read again soon.
#ifndef DLFUSE_CUDA_VEC16_CUH_
#define DLFUSE_CUDA_VEC16_CUH_

#include "device_math.cuh"

namespace dlfuse_cuda {

// 16 bytes of T.
template <class T>
struct Vec16 {
  static constexpr int N = 16 / sizeof(T);
  union {
    uint4 raw;
    T e[N];
  };
};

template <class T>
__device__ __forceinline__ Vec16<T> ld16(const T* p) {
  Vec16<T> v;
  v.raw = __ldcs(reinterpret_cast<const uint4*>(p));
  return v;
}
template <class T>
__device__ __forceinline__ void st16(T* p, const Vec16<T>& v) {
  __stcs(reinterpret_cast<uint4*>(p), v.raw);
}

// Scalar or 16-byte access of V elements of T: V == 1 or V == 16 / sizeof(T).
template <class T, int V>
struct Pack {
  float f[V];
  __device__ __forceinline__ void load(const T* p) {
    if constexpr (V == 1) {
      f[0] = ldf(p);
    } else {
      const Vec16<T> v = ld16(p);
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] = Cv<T>::ld(v.e[i]);
    }
  }
  __device__ __forceinline__ void fill(float s) {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = s;
  }
  // Streaming (evict-first) stores: the result is not read again soon. `cached`: it is (the
  // matmul backward's dZ, read by the GEMMs next, fits in L2).
  __device__ __forceinline__ void store(T* p, bool cached = false) const {
    if constexpr (V == 1) {
      stf(p, f[0]);
    } else {
      Vec16<T> v;
#pragma unroll
      for (int i = 0; i < V; ++i) v.e[i] = Cv<T>::st(f[i]);
      if (cached)
        *reinterpret_cast<uint4*>(p) = v.raw;
      else
        st16(p, v);
    }
  }
};

}  // namespace dlfuse_cuda

#endif
