// Elementwise kernels over strided views, one thread per element (grid-stride loops):
// copy (optionally with relu), zero, and add_mul_activation's generic forward and d_pre for
// the layouts its fast path does not take; relu in place over a compact array; and the
// per-device check that this build's device code runs on a GPU.
#include <string>
#include <type_traits>

#include "device_math.cuh"
#include "kernels.h"
#include "add_mul.cuh"
#include "launch.cuh"
#include "vec16.cuh"

namespace dlfuse_cuda {
namespace {

// Offset of element i (row-major over v's shape) through v's strides.
__device__ __forceinline__ int64_t offset_of(int64_t i, const View& v) {
  int64_t off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    const int64_t n = v.shape[d];
    const int64_t q = i / n;
    off += (i - q * n) * v.stride[d];
    i = q;
  }
  return off;
}

// ---- strided copy / zero / relu ------------------------------------------------------------
template <class T>
__global__ void copy_view_k(const T* src, View sv, T* dst, View dv, int op, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T v = src[offset_of(i, sv)];
    if (op == 1) {
      const float f = Cv<T>::ld(v);
      if (!(f > 0.f || f != f)) v = Cv<T>::st(0.f);
    }
    dst[offset_of(i, dv)] = v;
  }
}

// Rows `ld` units apart into a compact [rows, cu] array, in units U (16-byte vectors where
// every row is aligned, else elements).
template <class U>
__global__ void copy_rows_k(const U* src, int64_t ld, U* dst, int64_t rows, int64_t cu) {
  const int64_t n = rows * cu;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cu;
    dst[i] = src[r * ld + (i - r * cu)];
  }
}

// dst's 16-byte vectors over rows_p rows of ldp elements = src (rows x cols at strides
// so, si) where inside it, 0 past it.
template <class T>
__global__ void pad_rows_k(const T* src, int64_t so, int64_t si, int64_t rows, int64_t cols, T* dst, int64_t rows_p,
                           int64_t ldp) {
  constexpr int V = 16 / sizeof(T);
  const int64_t per_row = ldp / V, n = rows_p * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c0 = (i - r * per_row) * V;
    alignas(16) T e[V];
#pragma unroll
    for (int j = 0; j < V; ++j) e[j] = r < rows && c0 + j < cols ? src[r * so + (c0 + j) * si] : Cv<T>::st(0.f);
    reinterpret_cast<uint4*>(dst)[i] = *reinterpret_cast<const uint4*>(e);
  }
}

template <class T>
__global__ void zero_view_k(T* dst, View dv, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[offset_of(i, dv)] = Cv<T>::st(0.f);
}

template <class T, int V>
__global__ void relu_compact_k(T* p, int64_t nv) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nv; i += int64_t(gridDim.x) * blockDim.x) {
    Pack<T, V> a;
    a.load(p + i * V);
#pragma unroll
    for (int j = 0; j < V; ++j) a.f[j] = (a.f[j] > 0.f || a.f[j] != a.f[j]) ? a.f[j] : 0.f;
    a.store(p + i * V);
  }
}

template <class T>
__global__ void am_fwd_generic_k(const T* x, View xv, const T* y, View yv, const T* b, View bv, T* out, View ov,
                                 int act, float mult, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float pre = pre_of(ldf(x + offset_of(i, xv)), b ? ldf(b + offset_of(i, bv)) : 0.f, b != nullptr,
                             y ? ldf(y + offset_of(i, yv)) : 0.f, y != nullptr, mult);
    stf(out + offset_of(i, ov), act_fwd(act, pre));
  }
}

// d_pre over the output's shape, compact, in S: float for add_mul's reductions, T for the
// matmul backwards (their dZ feeds the GEMMs).
template <class T, class S>
__global__ void am_dpre_generic_k(const T* g, View gv, const T* x, View xv, const T* y, View yv, const T* b, View bv,
                                  S* dpre, int act, bool from_out, float mult, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = pre_of(ldf(x + offset_of(i, xv)), b ? ldf(b + offset_of(i, bv)) : 0.f, b != nullptr,
                           y ? ldf(y + offset_of(i, yv)) : 0.f, y != nullptr, mult);
    const float gi = ldf(g + offset_of(i, gv));
    stf(dpre + i, from_out ? act_bwd_out(act, v, gi) : act_bwd(act, v, gi));
  }
}

}  // namespace

View compact_view(const int64_t* shape, int rank) {
  View v;
  v.rank = rank;
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.stride[d] = s;
    s *= shape[d];
  }
  return v;
}

void copy_view(DType dt, const void* src, const View& sv, void* dst, const View& dv, int op, cudaStream_t s) {
  const int64_t n = dv.numel();
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    copy_view_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(src), sv, static_cast<T*>(dst), dv, op, n);
  });
  DLF_LAUNCHED("copy_view kernel");
}

void copy_rows(DType dt, const void* src, int64_t ld, void* dst, int64_t rows, int64_t C, cudaStream_t s) {
  const int64_t es = dsize(dt);
  if (rows * C == 0) return;
  auto launch = [&](auto unit) {
    using U = decltype(unit);
    const int64_t k = int64_t(sizeof(U)) / es, cu = C / k;
    copy_rows_k<U>
        <<<grid_for(rows * cu), kThreads, 0, s>>>(static_cast<const U*>(src), ld / k, static_cast<U*>(dst), rows, cu);
  };
  if ((C * es) % 16 == 0 && (ld * es) % 16 == 0 && aligned16(src) && aligned16(dst))
    launch(uint4{});
  else if (es == 4)
    launch(uint32_t{});
  else
    launch(uint16_t{});
  DLF_LAUNCHED("copy_rows kernel");
}

void pad_rows(DType dt, const void* src, int64_t so, int64_t si, int64_t rows, int64_t cols, void* dst, int64_t rows_p,
              int64_t ldp, cudaStream_t s) {
  if (rows_p * ldp == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    pad_rows_k<T><<<grid_for(rows_p * ldp / (16 / int64_t(sizeof(T)))), kThreads, 0, s>>>(
        static_cast<const T*>(src), so, si, rows, cols, static_cast<T*>(dst), rows_p, ldp);
  });
  DLF_LAUNCHED("pad_rows kernel");
}

void zero_view(DType dt, void* dst, const View& dv, cudaStream_t s) {
  const int64_t n = dv.numel();
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    zero_view_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dst), dv, n);
  });
  DLF_LAUNCHED("zero_view kernel");
}

void relu_compact(DType dt, void* p, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    if (n % V == 0 && aligned16(p))
      relu_compact_k<T, V><<<grid_for(n / V), kThreads, 0, s>>>(static_cast<T*>(p), n / V);
    else
      relu_compact_k<T, 1><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(p), n);
  });
  DLF_LAUNCHED("relu kernel");
}

void am_forward_generic(DType dt, const void* x, const View& xv, const void* y, const View& yv, const void* b,
                        const View& bv, void* out, const View& ov, int act, float mult, cudaStream_t s) {
  const int64_t n = ov.numel();
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    am_fwd_generic_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), xv, static_cast<const T*>(y), yv,
                                                         static_cast<const T*>(b), bv, static_cast<T*>(out), ov, act,
                                                         mult, n);
  });
  DLF_LAUNCHED("add_mul_activation generic forward kernel");
}

void am_dpre_generic(DType dt, const void* g, const View& gv, const void* x, const View& xv, const void* y,
                     const View& yv, const void* b, const View& bv, void* dpre, bool dpre_f32, int act, bool from_out,
                     float mult, cudaStream_t s) {
  const int64_t n = gv.numel();
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto* d) {
      using S = std::remove_pointer_t<decltype(d)>;
      am_dpre_generic_k<T, S><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(g), gv, static_cast<const T*>(x),
                                                               xv, static_cast<const T*>(y), yv,
                                                               static_cast<const T*>(b), bv, d, act, from_out, mult, n);
    };
    if (dpre_f32)
      launch(static_cast<float*>(dpre));
    else
      launch(static_cast<T*>(dpre));
  });
  DLF_LAUNCHED("add_mul_activation generic backward kernel");
}

bool device_has_kernels(int device, std::string* why) {
  cudaFuncAttributes attr{};
  cudaError_t e = cudaSetDevice(device);
  // Any kernel will do: the fat binary holds every kernel for the same architectures.
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&copy_view_k<float>));
  if (e == cudaSuccess) return true;
  cudaGetLastError();  // not sticky; leave nothing for the next launch check to report
  cudaDeviceProp p{};
  const bool named = cudaGetDeviceProperties(&p, device) == cudaSuccess;
  cudaGetLastError();
  *why = "device " + std::to_string(device) +
         (named ? " (" + std::string(p.name) + ", compute capability " + std::to_string(p.major) + "." +
                      std::to_string(p.minor) + ")"
                : std::string()) +
         ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + "); this build has device code for " +
         DLFUSE_CUDA_ARCHS + " (CMAKE_CUDA_ARCHITECTURES, docs/cuda.md)";
  return false;
}

}  // namespace dlfuse_cuda
