// The plugin's own kernels: strided copies and reductions, relu and its gradient for the
// matmul, and add_mul_activation forward/backward (16-byte vectors, one pass over memory).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "device_math.cuh"
#include "kernels.h"
#include "ops.h"

namespace dlfuse_cuda {
namespace {

// 16 bytes of T.
template <class T> struct Vec16 {
  static constexpr int N = 16 / sizeof(T);
  union {
    uint4 raw;
    T e[N];
  };
};

template <class T> __device__ __forceinline__ Vec16<T> ld16(const T* p) {
  Vec16<T> v;
  v.raw = __ldcs(reinterpret_cast<const uint4*>(p));
  return v;
}
template <class T> __device__ __forceinline__ void st16(T* p, const Vec16<T>& v) {
  __stcs(reinterpret_cast<uint4*>(p), v.raw);
}

// Scalar or 16-byte access of V elements of T: V == 1 or V == 16 / sizeof(T).
template <class T, int V> struct Pack {
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
      if (cached) *reinterpret_cast<uint4*>(p) = v.raw;
      else st16(p, v);
    }
  }
};

// ---- activations (float): sigm, act_fwd in device_math.cuh ------------------------------
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// grad * act'(p); relu is a select so a NaN/Inf grad where p <= 0 gives exactly 0.
template <bool FAST = false> __device__ __forceinline__ float act_bwd(int act, float p, float g) {
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

template <bool FROM_OUT, bool FAST> __device__ __forceinline__ float act_grad_of(int act, float v, float g) {
  if constexpr (FROM_OUT) return act_bwd_out(act, v, g);
  else return act_bwd<FAST>(act, v, g);
}

// The pre-activation of add_mul_activation, (x + b) + mult * y, where b and y may be absent
// (then x alone: the matmul epilogues' pre or out passes through unchanged).
__device__ __forceinline__ float pre_of(float x, float b, bool has_b, float y, bool has_y, float mult) {
  float p = x;
  if (has_b) p = p + b;
  if (has_y) p = p + mult * y;
  return p;
}

// ---- launch helpers -----------------------------------------------------------------------
constexpr int kThreads = 256;
constexpr int kReduceThreads = 256;  // a power of two: reduce_to_block_k halves it

int num_sms() {
  static std::atomic<int> cache[64];  // per device; 0 = not read yet
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (dev >= 0 && dev < 64 && (n = cache[dev].load(std::memory_order_relaxed)) > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) return 132;
  if (dev >= 0 && dev < 64) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t cap = int64_t(num_sms()) * 16;
  int64_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;  // grid-stride loops cover the rest
  return unsigned(b < 1 ? 1 : b);
}

template <class F> void by_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: f(float{}); break;
    case DType::kF16: f(__half{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
  }
}

// The activation as a compile-time constant, so a fast-path kernel holds one formula.
template <int A> struct ActC { static constexpr int value = A; };
template <class F> void by_act(int act, F&& f) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: f(ActC<DLFUSE_ACT_IDENTITY>{}); break;
    case DLFUSE_ACT_RELU: f(ActC<DLFUSE_ACT_RELU>{}); break;
    case DLFUSE_ACT_SIGMOID: f(ActC<DLFUSE_ACT_SIGMOID>{}); break;
    case DLFUSE_ACT_TANH: f(ActC<DLFUSE_ACT_TANH>{}); break;
    case DLFUSE_ACT_GELU_ERF: f(ActC<DLFUSE_ACT_GELU_ERF>{}); break;
    case DLFUSE_ACT_GELU_TANH: f(ActC<DLFUSE_ACT_GELU_TANH>{}); break;
    default: f(ActC<DLFUSE_ACT_SILU>{}); break;
  }
}

// The activations whose gradient reads `out`, for the out-form kernels.
template <class F> void by_act_out(int act, F&& f) {
  switch (act) {
    case DLFUSE_ACT_RELU: f(ActC<DLFUSE_ACT_RELU>{}); break;
    case DLFUSE_ACT_SIGMOID: f(ActC<DLFUSE_ACT_SIGMOID>{}); break;
    case DLFUSE_ACT_TANH: f(ActC<DLFUSE_ACT_TANH>{}); break;
    default: f(ActC<DLFUSE_ACT_IDENTITY>{}); break;
  }
}

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

template <class T> __global__ void zero_view_k(T* dst, View dv, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[offset_of(i, dv)] = Cv<T>::st(0.f);
}

template <class T, int V> __global__ void relu_compact_k(T* p, int64_t nv) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nv; i += int64_t(gridDim.x) * blockDim.x) {
    Pack<T, V> a;
    a.load(p + i * V);
#pragma unroll
    for (int j = 0; j < V; ++j) a.f[j] = (a.f[j] > 0.f || a.f[j] != a.f[j]) ? a.f[j] : 0.f;
    a.store(p + i * V);
  }
}

// ---- reductions ---------------------------------------------------------------------------
struct RedDims {
  int n = 0;
  int dims[kMaxRank] = {};
};

// Offsets of output j of `dv` (row-major over its aligned shape) in src (compact strides of
// `full`) and in dst.
__device__ inline void reduce_offsets(int64_t j, const View& full, const View& dv, int64_t* src_off, int64_t* dst_off) {
  int64_t rem = j, so = 0, dof = 0;
  for (int d = dv.rank - 1; d >= 0; --d) {
    const int64_t q = rem / dv.shape[d];
    const int64_t idx = rem - q * dv.shape[d];
    rem = q;
    so += idx * full.stride[d];
    dof += idx * dv.stride[d];
  }
  *src_off = so;
  *dst_off = dof;
}

// Offset of reduced element k of an output whose first element is at `off`.
__device__ inline int64_t reduced_offset(int64_t k, int64_t off, const View& full, const RedDims& red) {
  for (int e = red.n - 1; e >= 0; --e) {
    const int d = red.dims[e];
    const int64_t q = k / full.shape[d];
    off += (k - q * full.shape[d]) * full.stride[d];
    k = q;
  }
  return off;
}

// Many outputs, few terms each: one thread per output. Double accumulation: a float sum
// stops growing at 2^24 equal terms.
template <class T, class S>
__global__ void reduce_to_k(const S* src, View full, T* dst, View dv, RedDims red, float scale, int64_t n_out,
                            int64_t n_red) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n_out; j += int64_t(gridDim.x) * blockDim.x) {
    int64_t src_off, dst_off;
    reduce_offsets(j, full, dv, &src_off, &dst_off);
    double acc = 0.0;
    for (int64_t k = 0; k < n_red; ++k) acc += Cv<S>::ld(src[reduced_offset(k, src_off, full, red)]);
    dst[dst_off] = Cv<T>::st(float(double(scale) * acc));
  }
}

// Few outputs, many terms each (a scalar or [1, N]-like gradient of a large tensor): one
// block per output, its threads stride over the terms, then a tree in shared memory.
template <class T, class S>
__global__ void reduce_to_block_k(const S* src, View full, T* dst, View dv, RedDims red, float scale,
                                  int64_t n_out, int64_t n_red) {
  __shared__ double part[kReduceThreads];
  for (int64_t j = blockIdx.x; j < n_out; j += gridDim.x) {
    int64_t src_off, dst_off;
    reduce_offsets(j, full, dv, &src_off, &dst_off);
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < n_red; k += blockDim.x)
      acc += Cv<S>::ld(src[reduced_offset(k, src_off, full, red)]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) dst[dst_off] = Cv<T>::st(float(double(scale) * part[0]));
    __syncthreads();  // part[] is reused by the block's next output
  }
}

template <class T>
__global__ void colsum_k(const T* m, int64_t R, int64_t C, int64_t rows_per_chunk, float* partial) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(R, r0 + rows_per_chunk);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r) acc += ldf(m + r * C + c);
  partial[blockIdx.y * C + c] = acc;
}

struct ColsumDsts {
  ColsumDst d[3];
  int n;
};

// A block of kFinishLanes x kFinishLanes threads owns kFinishLanes columns: its rows of
// threads split the partial rows among them, then one row sums the lanes. (One thread per
// column reading every partial row in turn measured 13-17 us on the H100 for 1024 columns of
// 512 partial rows, more than the pass that made them.)
constexpr int kFinishLanes = 32;

template <class T> __global__ void finish_colsums_k(const float* partial, int nchunks, int64_t C, ColsumDsts dst) {
  __shared__ float lane[kFinishLanes][kFinishLanes + 1];
  const int64_t c = blockIdx.x * int64_t(kFinishLanes) + threadIdx.x;
  float acc = 0.f;
  if (c < C)
    for (int k = threadIdx.y; k < nchunks; k += kFinishLanes) acc += partial[k * C + c];
  lane[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sum = 0.f;
#pragma unroll 8
  for (int j = 0; j < kFinishLanes; ++j) sum += lane[j][threadIdx.x];
  for (int i = 0; i < dst.n; ++i) static_cast<T*>(dst.d[i].p)[c * dst.d[i].stride] = Cv<T>::st(dst.d[i].scale * sum);
}

// One block sums everything (used for a scalar gradient: C partial columns x nchunks).
template <class T>
__global__ void finish_total_k(const float* partial, int64_t n, T* dst, float scale) {
  __shared__ float sh[kThreads];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) dst[0] = Cv<T>::st(scale * sh[0]);
}

// ---- add_mul_activation fast path -----------------------------------------------------------
// Block: threads over column vectors; blockIdx.y: a chunk of rows. Operands in kRow/kScalar
// mode are read once per thread; kFull ones once per element. U rows are loaded before any
// is computed so that several 16-byte loads per thread are in flight.
constexpr int kUnroll = 2;
constexpr int kFormXYB = 0, kFormPre = 1, kFormOut = 2;

template <class T, int V>
__device__ __forceinline__ void load_hoisted(Pack<T, V>& p, const void* ptr, int mode, int64_t cv) {
  if (mode == kRow) p.load(static_cast<const T*>(ptr) + cv * V);
  else if (mode == kScalar) p.fill(ldf(static_cast<const T*>(ptr)));
  else if (mode == kAbsent) p.fill(0.f);
}

template <class T, int V, int ACT>
__global__ void __launch_bounds__(kThreads) am_fwd_k(AmFast p, int64_t Cv_, int64_t /*rows_per_chunk*/) {
  const int64_t cv = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (cv >= Cv_) return;
  // Rows interleave over blockIdx.y: at any moment the grid works on a band of consecutive
  // whole rows, which keeps DRAM accesses local (chunked row ranges measured 5% slower).
  const int64_t step = gridDim.y;
  Pack<T, V> hx, hy, hb;
  load_hoisted(hx, p.x, p.xm, cv);
  load_hoisted(hy, p.y, p.ym, cv);
  load_hoisted(hb, p.b, p.bm, cv);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  const T* b = static_cast<const T*>(p.b);
  T* out = static_cast<T*>(p.out);
  constexpr int U = V >= 8 ? 1 : kUnroll;  // 16-bit data: 8 elements a vector already
  for (int64_t r = blockIdx.y; r < p.R; r += U * step) {
    Pack<T, V> xs[U], ys[U], bs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        if (p.xm == kFull) xs[u].load(x + off); else xs[u] = hx;
        if (p.ym == kFull) ys[u].load(y + off); else ys[u] = hy;
        if (p.bm == kFull) bs[u].load(b + off); else bs[u] = hb;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        Pack<T, V> o;
#pragma unroll
        for (int j = 0; j < V; ++j)
          o.f[j] = act_fwd<sizeof(T) == 2>(ACT, pre_of(xs[u].f[j], bs[u].f[j], p.bm != kAbsent, ys[u].f[j],
                                                       p.ym != kAbsent, p.mult));
        o.store(out + (r + u * step) * p.C + cv * V);
      }
    }
  }
}

// FORM: kFormXYB, the pre-activation from x, y, b; kFormPre, x alone is it; kFormOut, x
// alone is the forward's out. The one-operand forms hold no y and b registers, which lets
// more blocks be resident (their rows in flight are what a bandwidth-bound pass needs).
template <class T, int V, int ACT, int FORM>
__global__ void __launch_bounds__(kThreads) am_bwd_k(AmFast p, int64_t Cv_, int64_t /*rows_per_chunk*/, float* partial) {
  const int64_t cv = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (cv >= Cv_) return;
  const int64_t step = gridDim.y;  // interleaved rows, as in am_fwd_k
  constexpr bool XONLY = FORM != kFormXYB;
  Pack<T, V> hx, hy, hb, hg;
  load_hoisted(hx, p.x, p.xm, cv);
  if constexpr (!XONLY) {
    load_hoisted(hy, p.y, p.ym, cv);
    load_hoisted(hb, p.b, p.bm, cv);
  }
  load_hoisted(hg, p.g, p.gm, cv);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  const T* b = static_cast<const T*>(p.b);
  const T* g = static_cast<const T*>(p.g);
  T* gx = static_cast<T*>(p.gx);
  T* gy = static_cast<T*>(p.gy);
  T* gb = static_cast<T*>(p.gb);
  const bool reduce = am_reduces(p);
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  // The out form keeps the unroll of the other: twice the rows in flight measured slower on
  // the H100 (float32 16384x8192 relu from out: 0.777 -> 0.851 ms; bfloat16 level).
  constexpr int U = V >= 8 ? 1 : kUnroll;
  for (int64_t r = blockIdx.y; r < p.R; r += U * step) {
    Pack<T, V> xs[U], ys[U], bs[U], gs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        if (p.xm == kFull) xs[u].load(x + off); else xs[u] = hx;
        if constexpr (!XONLY) {
          if (p.ym == kFull) ys[u].load(y + off); else ys[u] = hy;
          if (p.bm == kFull) bs[u].load(b + off); else bs[u] = hb;
        }
        if (p.gm == kFull) gs[u].load(g + off); else gs[u] = hg;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        Pack<T, V> d, dy;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = XONLY ? xs[u].f[j]
                                : pre_of(xs[u].f[j], bs[u].f[j], p.bm != kAbsent, ys[u].f[j], p.ym != kAbsent, p.mult);
          d.f[j] = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, v, gs[u].f[j]);
          dy.f[j] = p.mult * d.f[j];
          sum[j] += d.f[j];
        }
        if (p.gxm == kFull) d.store(gx + off, p.gx_cached);
        if (p.gym == kFull) dy.store(gy + off);
        if (p.gbm == kFull) d.store(gb + off);
      }
    }
  }
  if (reduce) {
#pragma unroll
    for (int j = 0; j < V; ++j) partial[blockIdx.y * p.C + cv * V + j] = sum[j];
  }
}

// The backward's small form (am_bwd_small_k, use_small): one launch, the column sums
// finished inside the block, so no partials and no finish kernel: one launch less per call,
// where a training step of small layers is bound by the host (the DLRM example's compiled
// step on the H100: 1.027 -> 0.997 of PyTorch's, docs/performance.md, eighth session). A block
// is kSmallLanes columns x kSmallLanes row lanes; lane l takes rows l, l + 32, ... and the
// lanes' sums are added in lane order, so the sums are deterministic.
constexpr int kSmallLanes = 32;

template <class T> __device__ __forceinline__ float operand_at(const void* ptr, int mode, int64_t off, int64_t c) {
  const T* t = static_cast<const T*>(ptr);
  return mode == kFull ? ldf(t + off) : mode == kRow ? ldf(t + c) : mode == kScalar ? ldf(t) : 0.f;
}

// Column c's sum s into the row-mode gradients (grad_y scaled by the multiplier).
template <class T> __device__ __forceinline__ void store_row_sums(const AmFast& p, int64_t c, float s) {
  if (p.gxm == kRow) static_cast<T*>(p.gx)[c * p.gx_stride] = Cv<T>::st(s);
  if (p.gym == kRow) static_cast<T*>(p.gy)[c * p.gy_stride] = Cv<T>::st(p.mult * s);
  if (p.gbm == kRow) static_cast<T*>(p.gb)[c * p.gb_stride] = Cv<T>::st(s);
}

template <class T, int ACT, int FORM>
__global__ void __launch_bounds__(kSmallLanes * kSmallLanes) am_bwd_small_k(AmFast p) {
  __shared__ float lane[kSmallLanes][kSmallLanes + 1];
  const int64_t c = blockIdx.x * int64_t(kSmallLanes) + threadIdx.x;
  const bool active = c < p.C;
  T* gx = static_cast<T*>(p.gx);
  T* gy = static_cast<T*>(p.gy);
  T* gb = static_cast<T*>(p.gb);
  float sum = 0.f;
  for (int64_t r = threadIdx.y; active && r < p.R; r += kSmallLanes) {
    const int64_t off = r * p.C + c;
    const float x = operand_at<T>(p.x, p.xm, off, c);
    const float v = FORM == kFormXYB ? pre_of(x, operand_at<T>(p.b, p.bm, off, c), p.bm != kAbsent,
                                              operand_at<T>(p.y, p.ym, off, c), p.ym != kAbsent, p.mult)
                                     : x;
    const float d = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, v, operand_at<T>(p.g, p.gm, off, c));
    sum += d;
    if (p.gxm == kFull) gx[off] = Cv<T>::st(d);
    if (p.gym == kFull) gy[off] = Cv<T>::st(p.mult * d);
    if (p.gbm == kFull) gb[off] = Cv<T>::st(d);
  }
  lane[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  float s = 0.f;
#pragma unroll 8
  for (int j = 0; j < kSmallLanes; ++j) s += lane[j][threadIdx.x];
  store_row_sums<T>(p, c, s);
}

// The backward's flat form for large x-only problems (out or pre form, 16-byte vectors):
// a 1-D grid of short blocks, flat_rows<T>() rows x 256 column vectors each, column chunk
// fastest, so the GPU sweeps memory in address order and a finished block frees its slot at
// once. A single wave of long-lived blocks (am_bwd_k) stops at ~93% of the copy bandwidth on
// the H100, this at ~95.6% (bench/cuda/am_bwd_variants, v11k). The column sums stay
// deterministic and need no second kernel: each block stores its sums to a row of level 0;
// per column chunk, the last block (counted by an atomic) of each node of kFlatGroup rows
// adds the node's rows in order into a row of the next level, and so on up a tree, until the
// last block of the root writes the gradients. Level 0's consumed lines are dropped from L2
// (never read again, so never written back). Each counter is reset by the block that counts
// last, so the counters are zero again when the kernel ends: a block of counters kept zero
// per stream (zeroed_counters) needs no memset before the next call.
constexpr int kFlatGroup = 16;
constexpr int kFlatLevels = 8;  // 16^8 block rows: more than a grid holds
template <class T> constexpr int flat_rows() { return 32 / (16 / int(sizeof(T))); }  // 8 for float, 4 for 16-bit

struct FlatWs {
  float* rows[kFlatLevels] = {};     // level l: count[l] rows of C sums; level 0 one per block row
  unsigned* cnt[kFlatLevels] = {};   // level l: one per (node of kFlatGroup rows, column chunk), zero at launch
  int64_t count[kFlatLevels] = {};
  float* total = nullptr;            // [C]: the root's column sums, for a scalar gradient's finish
  int64_t nrb = 0, chunks = 0;
  int levels = 0;                    // the root is level levels - 1 (count <= kFlatGroup)
};

// The column sums `s` (V columns from cv * V) into the row-mode gradients, and into w.total
// when a gradient is a scalar.
template <class T, int V>
__device__ void flat_write_sums(const AmFast& p, const FlatWs& w, int64_t cv, const float* s) {
  for (int j = 0; j < V; ++j) {
    store_row_sums<T>(p, cv * V + j, s[j]);
    if (w.total) w.total[cv * V + j] = s[j];
  }
}

// Every thread of the block: stores its V sums `s` as row `row` of level l (read by another
// block, so through L2 and fenced), then thread 0 counts the block in the row's node: `last`
// (shared; read after a barrier) is true for the block that counts last, which zeroes the
// counter for the next call.
template <int V>
__device__ void flat_arrive(const FlatWs& w, int64_t C, int l, int64_t row, int64_t cc, int64_t cv, bool active,
                            const float* s, bool& last) {
  if (active) {
    float* dst = w.rows[l] + row * C + cv * V;
#pragma unroll
    for (int j = 0; j < V; j += 4)
      __stcg(reinterpret_cast<float4*>(dst + j), make_float4(s[j], s[j + 1], s[j + 2], s[j + 3]));
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int64_t node = row / kFlatGroup;
  unsigned* c = w.cnt[l] + node * w.chunks + cc;
  last = atomicAdd(c, 1u) == unsigned(min(int64_t(kFlatGroup), w.count[l] - node * kFlatGroup) - 1);
  if (last) atomicExch(c, 0u);
}

// Called by every thread of the block that counted last in its node of level 0 (block row
// idx): sums the node's rows in order, and climbs while it is the last of the next node.
template <class T, int V>
__device__ void flat_climb(const AmFast& p, const FlatWs& w, int64_t cc, int64_t cv, bool active, int64_t idx,
                           bool& last) {
  for (int l = 0;; ++l) {
    const int64_t node = idx / kFlatGroup, first = node * kFlatGroup;
    const int64_t members = min(int64_t(kFlatGroup), w.count[l] - first);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.f;
    // kBatch rows' loads in flight at once, then added in row order: the climb is the
    // kernel's tail, and one load at a time made it a chain of up to 40 L2 round trips.
    // Registers (ptxas, sm_90): with 8 rows float's kernels take 110-113, 2 blocks of 256
    // per multiprocessor as before, except identity (46 before: 5 blocks); for 16-bit types
    // 4 rows took bfloat16 relu to 98 (2 blocks instead of 3), 2 rows keep it at 80, while
    // float16's and other activations' kernels went from 75-79 to 82-90 (3 blocks to 2).
    // Only float32 and bfloat16 relu were timed (docs/performance.md, ninth session).
    constexpr int kBatch = V == 4 ? 8 : 2;
    if (active)
#pragma unroll
      for (int m0 = 0; m0 < kFlatGroup; m0 += kBatch) {
        float4 v[kBatch][V / 4];
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (m0 + u < members)
#pragma unroll
            for (int j = 0; j < V; j += 4)
              v[u][j / 4] = __ldcg(reinterpret_cast<const float4*>(w.rows[l] + (first + m0 + u) * p.C + cv * V + j));
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (m0 + u < members)
#pragma unroll
            for (int j = 0; j < V; j += 4) {
              acc[j] += v[u][j / 4].x; acc[j + 1] += v[u][j / 4].y;
              acc[j + 2] += v[u][j / 4].z; acc[j + 3] += v[u][j / 4].w;
            }
      }
#if __CUDA_ARCH__ >= 800  // discard.global.L2 is sm_80+; older GPUs write the lines back
    if (l == 0) {
      __syncthreads();  // every thread has read its rows
      // Whole 128-byte lines only (row bases are line-aligned when C % 32 == 0).
      constexpr int kPerLine = 32 / V;
      if (active && p.C % 32 == 0 && cv % kPerLine == 0 && (cv + kPerLine) * V <= p.C)
        for (int64_t m = 0; m < members; ++m)
          asm volatile("discard.global.L2 [%0], 128;" ::"l"(w.rows[0] + (first + m) * p.C + cv * V) : "memory");
    }
#endif
    if (l == w.levels - 1) {
      if (active) flat_write_sums<T, V>(p, w, cv, acc);
      return;
    }
    flat_arrive<V>(w, p.C, l + 1, node, cc, cv, active, acc, last);
    __syncthreads();
    if (!last) return;
    __threadfence();
    idx = node;
  }
}

template <class T, int V, int ACT, int FORM>
__global__ void __launch_bounds__(kThreads) am_bwd_flat_k(AmFast p, FlatWs w) {
  static_assert(FORM != kFormXYB, "the flat form holds x (and grad) rows only");
  constexpr int ROWS = flat_rows<T>();
  const int64_t Cv = p.C / V;
  const int64_t cc = int64_t(blockIdx.x) % w.chunks, rb = int64_t(blockIdx.x) / w.chunks;
  const int64_t cv = cc * kThreads + threadIdx.x;
  const bool active = cv < Cv;
  const int64_t r0 = rb * ROWS;
  const bool reduce = am_reduces(p);
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  Pack<T, V> xs[ROWS], gs[ROWS];
  if (active) {  // x and grad_out full (use_flat): every load issued before any is used
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
        const int64_t off = (r0 + u) * p.C + cv * V;
        xs[u].load(x + off);
        gs[u].load(g + off);
      }
  }
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  Pack<T, V> ds[ROWS];
  if (active) {
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          ds[u].f[j] = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, xs[u].f[j], gs[u].f[j]);
          sum[j] += ds[u].f[j];
        }
      }
  }
  // The block's sums and its count before the big stores: the fence then waits for this
  // store only, and the atomic's round trip overlaps the stores.
  __shared__ bool last;
  if (reduce) flat_arrive<V>(w, p.C, 0, rb, cc, cv, active, sum, last);
  if (active) {
    T* gx = static_cast<T*>(p.gx);
    T* gy = static_cast<T*>(p.gy);
    T* gb = static_cast<T*>(p.gb);
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
        const int64_t off = (r0 + u) * p.C + cv * V;
        Pack<T, V> dy;
#pragma unroll
        for (int j = 0; j < V; ++j) dy.f[j] = p.mult * ds[u].f[j];
        if (p.gxm == kFull) ds[u].store(gx + off, p.gx_cached);
        if (p.gym == kFull) dy.store(gy + off);
        if (p.gbm == kFull) ds[u].store(gb + off);
      }
  }
  if (!reduce) return;
  __syncthreads();
  if (!last) return;
  __threadfence();
  flat_climb<T, V>(p, w, cc, cv, active, rb, last);
}

// Grid geometry of the fast path: threads over column vectors, blockIdx.y over row chunks,
// about 8 blocks of 256 threads per multiprocessor in all.
struct Geometry {
  int64_t Cv = 0, rows_per_chunk = 1;
  unsigned bx = kThreads, gx = 1, gy = 1;
};

// blocks_per_sm: how many blocks of the kernel fit on a multiprocessor at once, so that the
// grid is one full wave (no tail of a partial wave).
Geometry geometry(int64_t R, int64_t C, int V, int blocks_per_sm) {
  Geometry g;
  g.Cv = C / V;
  g.bx = unsigned(std::min<int64_t>(kThreads, ((g.Cv + 31) / 32) * 32));
  g.gx = unsigned((g.Cv + g.bx - 1) / g.bx);
  const int64_t target = int64_t(num_sms()) * std::max(1, blocks_per_sm);
  int64_t chunks = std::max<int64_t>(1, target / g.gx);  // floor: never a partial second wave
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, R / 8));  // >= 8 rows a chunk
  chunks = std::min<int64_t>(chunks, 65535);
  g.rows_per_chunk = (R + chunks - 1) / chunks;
  if (g.rows_per_chunk < 1) g.rows_per_chunk = 1;
  g.gy = unsigned(std::max<int64_t>(1, (R + g.rows_per_chunk - 1) / g.rows_per_chunk));
  return g;
}

// Resident blocks of `kernel` per multiprocessor at the block size geometry() picks.
template <class K> int blocks_per_sm(K kernel, int64_t Cv) {
  const int bx = int(std::min<int64_t>(kThreads, ((Cv + 31) / 32) * 32));
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
  static std::mutex mu;
  // Per device: threads and registers per multiprocessor differ between architectures,
  // and one machine can hold GPUs of several.
  static std::map<std::tuple<const void*, int, int>, int> cache;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), bx, dev);
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, bx, 0) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return 4;
  }
  std::lock_guard<std::mutex> g(mu);
  cache[key] = n;
  return n;
}

// The backward kernel's compile-time activation and form: from out only for the four
// activations that allow it.
template <int F> struct FormC { static constexpr int value = F; };
template <class F> void by_bwd_kernel(const AmFast& p, F&& f) {
  if (p.from_out) by_act_out(p.act, [&](auto a) { f(a, FormC<kFormOut>{}); });
  else if (p.ym == kAbsent && p.bm == kAbsent) by_act(p.act, [&](auto a) { f(a, FormC<kFormPre>{}); });
  else by_act(p.act, [&](auto a) { f(a, FormC<kFormXYB>{}); });
}

template <class T, int V, int ACT, int FORM> Geometry bwd_geometry(const AmFast& p);

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class T, int V, int ACT, int FORM> Geometry bwd_geometry(const AmFast& p) {
  return geometry(p.R, p.C, V, blocks_per_sm(am_bwd_k<T, V, ACT, FORM>, p.C / V));
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

// ---- host launchers ---------------------------------------------------------------------------

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

void reduce_to(DType dt, const void* src, bool src_f32, const View& full, void* dst, const View& dst_aligned,
               float scale, cudaStream_t s) {
  const int64_t n_out = dst_aligned.numel();
  if (n_out == 0) return;
  RedDims red;
  int64_t n_red = 1;
  for (int d = 0; d < full.rank; ++d)
    if (dst_aligned.shape[d] == 1 && full.shape[d] != 1) {
      red.dims[red.n++] = d;
      n_red *= full.shape[d];
    }
  // One thread per output leaves the GPU idle when there are few outputs (a scalar bias has
  // one): then a block per output.
  const bool per_block = n_out < 16384 && n_red >= 1024;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto* typed_src) {
      using S = std::remove_const_t<std::remove_pointer_t<decltype(typed_src)>>;
      if (per_block)
        reduce_to_block_k<T, S><<<unsigned(std::min<int64_t>(n_out, 65535)), kReduceThreads, 0, s>>>(
            typed_src, full, static_cast<T*>(dst), dst_aligned, red, scale, n_out, n_red);
      else
        reduce_to_k<T, S><<<grid_for(n_out), kThreads, 0, s>>>(typed_src, full, static_cast<T*>(dst), dst_aligned,
                                                               red, scale, n_out, n_red);
    };
    if (src_f32)
      launch(static_cast<const float*>(src));
    else
      launch(static_cast<const T*>(src));
  });
  DLF_LAUNCHED("reduce_to kernel");
}

int colsum_partials(DType dt, const void* m, int64_t R, int64_t C, float* partial, int max_chunks, cudaStream_t s) {
  const unsigned bx = unsigned(std::min<int64_t>(kThreads, ((C + 31) / 32) * 32));
  const unsigned gx = unsigned((C + bx - 1) / bx);
  int64_t chunks = std::max<int64_t>(1, (int64_t(num_sms()) * 8 + gx - 1) / gx);
  chunks = std::min<int64_t>({chunks, int64_t(max_chunks), std::max<int64_t>(1, R)});
  const int64_t rpc = std::max<int64_t>(1, (R + chunks - 1) / chunks);
  const int nchunks = int(std::max<int64_t>(1, (R + rpc - 1) / rpc));
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    colsum_k<T><<<dim3(gx, unsigned(nchunks)), bx, 0, s>>>(static_cast<const T*>(m), R, C, rpc, partial);
  });
  DLF_LAUNCHED("colsum kernel");
  return nchunks;
}

void finish_colsum(DType dt, const float* partial, int nchunks, int64_t C, void* dst, int64_t dst_stride, float scale,
                   bool total, cudaStream_t s) {
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    if (total) finish_total_k<T><<<1, kThreads, 0, s>>>(partial, int64_t(nchunks) * C, static_cast<T*>(dst), scale);
  });
  DLF_LAUNCHED("finish_colsum kernel");
  if (!total) {
    const ColsumDst one{dst, dst_stride, scale};
    finish_colsums(dt, partial, nchunks, C, &one, 1, s);
  }
}

void finish_colsums(DType dt, const float* partial, int nchunks, int64_t C, const ColsumDst* dst, int n,
                    cudaStream_t s) {
  ColsumDsts d{};
  for (int i = 0; i < n && i < 3; ++i) d.d[i] = dst[i];
  d.n = n < 3 ? n : 3;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    const unsigned blocks = unsigned((C + kFinishLanes - 1) / kFinishLanes);
    finish_colsums_k<T><<<blocks, dim3(kFinishLanes, kFinishLanes), 0, s>>>(partial, nchunks, C, d);
  });
  DLF_LAUNCHED("finish_colsums kernel");
}

bool am_vectorizable(DType dt, const AmFast& p) {
  const int V = 16 / dsize(dt);
  if (p.C % V != 0) return false;
  auto ok = [](const void* ptr, int mode) { return mode == kScalar || mode == kAbsent || !ptr || aligned16(ptr); };
  return ok(p.x, p.xm) && ok(p.y, p.ym) && ok(p.b, p.bm) && ok(p.g, p.gm) && ok(p.out, kFull) &&
         ok(p.gx, p.gxm == kFull ? kFull : kAbsent) && ok(p.gy, p.gym == kFull ? kFull : kAbsent) &&
         ok(p.gb, p.gbm == kFull ? kFull : kAbsent);
}

void am_forward_fast(DType dt, const AmFast& p, cudaStream_t s) {
  if (p.R * p.C == 0) return;
  const bool vec = am_vectorizable(dt, p);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_act(p.act, [&](auto a) {
      constexpr int ACT = decltype(a)::value;
      if (vec) {
        const Geometry g = geometry(p.R, p.C, V, blocks_per_sm(am_fwd_k<T, V, ACT>, p.C / V));
        am_fwd_k<T, V, ACT><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk);
      } else {
        const Geometry g = geometry(p.R, p.C, 1, blocks_per_sm(am_fwd_k<T, 1, ACT>, p.C));
        am_fwd_k<T, 1, ACT><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk);
      }
    });
  });
  DLF_LAUNCHED("add_mul_activation forward kernel");
}

// The flat form serves large x-only problems with 16-byte vectors (measured there; the
// three-operand form keeps am_bwd_k: its rows hold twice the registers). Its counter memset
// and group bookkeeping cost more than its better bandwidth gains on small problems: at 2^22
// elements (4096x1024) the one-wave kernel was 8-24% faster, at 2^27 the flat form 3.7%
// (H100, docs/performance.md, eighth session); between them it is not measured.
constexpr int64_t kFlatMinElems = int64_t(1) << 26;

// The flat form's tree and, with `base`, its rows (then its counters, when `zeroed` is
// null) in the workspace at `base`; sizes only without.
template <class T> FlatWs flat_layout(const AmFast& p, void* base, unsigned* zeroed, size_t* bytes, size_t* counters) {
  FlatWs w;
  w.chunks = (p.C / (16 / int64_t(sizeof(T))) + kThreads - 1) / kThreads;
  w.nrb = (p.R + flat_rows<T>() - 1) / flat_rows<T>();
  size_t nrows = 0, ncnt = 0;
  for (int64_t n = w.nrb; w.levels < kFlatLevels; n = (n + kFlatGroup - 1) / kFlatGroup) {
    w.count[w.levels++] = n;
    nrows += size_t(n);
    ncnt += size_t((n + kFlatGroup - 1) / kFlatGroup * w.chunks);
    if (n <= kFlatGroup) break;
  }
  const bool scalar = p.gxm == kScalar || p.gym == kScalar || p.gbm == kScalar;
  if (scalar) ++nrows;  // the total row
  if (counters) *counters = ncnt;
  if (bytes) *bytes = nrows * size_t(p.C) * sizeof(float) + ncnt * sizeof(unsigned);
  if (!base) return w;
  char* c = static_cast<char*>(base);
  for (int l = 0; l < w.levels; ++l) {
    w.rows[l] = reinterpret_cast<float*>(c);
    c += size_t(w.count[l]) * size_t(p.C) * sizeof(float);
  }
  if (scalar) {
    w.total = reinterpret_cast<float*>(c);
    c += size_t(p.C) * sizeof(float);
  }
  unsigned* cnt = zeroed ? zeroed : reinterpret_cast<unsigned*>(c);
  for (int l = 0; l < w.levels; ++l) {
    w.cnt[l] = cnt;
    cnt += (w.count[l] + kFlatGroup - 1) / kFlatGroup * w.chunks;
  }
  return w;
}

bool use_flat(DType dt, const AmFast& p) {
  if (!am_vectorizable(dt, p) || p.R * p.C < kFlatMinElems || p.xm != kFull || p.gm != kFull) return false;
  if (!p.from_out && !(p.ym == kAbsent && p.bm == kAbsent)) return false;
  bool fits = false;  // the 1-D grid's blocks, and a tree of at most kFlatLevels
  by_dtype(dt, [&](auto t) {
    const FlatWs w = flat_layout<decltype(t)>(p, nullptr, nullptr, nullptr, nullptr);
    fits = w.chunks * w.nrb <= INT32_MAX && w.count[w.levels - 1] <= kFlatGroup;
  });
  return fits;
}

// The small form: at most 2^18 elements and 64 rows a lane, sums into rows only (a scalar
// gradient sums over the block's columns too). DLFUSE_CUDA_SMALL_BACKWARD=0 turns it off.
bool use_small(const AmFast& p) {
  static const bool on = env_enabled("DLFUSE_CUDA_SMALL_BACKWARD");
  return on && p.R * p.C <= (int64_t(1) << 18) && p.R <= 64 * kSmallLanes && p.gxm != kScalar &&
         p.gym != kScalar && p.gbm != kScalar;
}

void am_backward_small(DType dt, const AmFast& p, cudaStream_t s) {
  const unsigned blocks = unsigned((p.C + kSmallLanes - 1) / kSmallLanes);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      am_bwd_small_k<T, ACT, FO><<<blocks, dim3(kSmallLanes, kSmallLanes), 0, s>>>(p);
    });
  });
  DLF_LAUNCHED("add_mul_activation backward kernel (small form)");
}

size_t am_backward_workspace(DType dt, const AmFast& p) {
  if (use_small(p)) return 0;
  if (use_flat(dt, p)) {
    size_t n = 0;
    by_dtype(dt, [&](auto t) { flat_layout<decltype(t)>(p, nullptr, nullptr, &n, nullptr); });
    return n;
  }
  const bool vec = am_vectorizable(dt, p);
  size_t chunks = 1;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      chunks = vec ? bwd_geometry<T, V, ACT, FO>(p).gy : bwd_geometry<T, 1, ACT, FO>(p).gy;
    });
  });
  return chunks * size_t(p.C) * sizeof(float);
}

bool am_backward_counts(DType dt, const AmFast& p) {
  return p.R * p.C > 0 && am_reduces(p) && !use_small(p) && use_flat(dt, p);
}

// Launches the flat form, which writes the row gradients itself; returns its column sums
// for a scalar gradient's finish (null when there is none).
float* am_backward_flat(DType dt, const AmFast& p, bool reduce, void* workspace, unsigned* zeroed, cudaStream_t s) {
  float* total = nullptr;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    size_t ncnt = 0;
    flat_layout<T>(p, nullptr, nullptr, nullptr, &ncnt);
    if (ncnt > kZeroedCounters) zeroed = nullptr;
    const FlatWs w = flat_layout<T>(p, reduce ? workspace : nullptr, zeroed, nullptr, nullptr);
    if (reduce && !zeroed) DLF_CUDA(cudaMemsetAsync(w.cnt[0], 0, ncnt * sizeof(unsigned), s));
    const unsigned blocks = unsigned(w.chunks * w.nrb);
    if (p.from_out)
      by_act_out(p.act, [&](auto a) {
        constexpr int ACT = decltype(a)::value;
        am_bwd_flat_k<T, V, ACT, kFormOut><<<blocks, kThreads, 0, s>>>(p, w);
      });
    else
      by_act(p.act, [&](auto a) {
        constexpr int ACT = decltype(a)::value;
        am_bwd_flat_k<T, V, ACT, kFormPre><<<blocks, kThreads, 0, s>>>(p, w);
      });
    total = w.total;
  });
  DLF_LAUNCHED("add_mul_activation backward kernel (flat form)");
  return total;
}

// The scalar-mode gradients from `nchunks` rows of column sums.
void finish_scalars(DType dt, const AmFast& p, const float* partial, int nchunks, cudaStream_t s) {
  if (p.gxm == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gx, 0, 1.f, true, s);
  if (p.gym == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gy, 0, p.mult, true, s);
  if (p.gbm == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gb, 0, 1.f, true, s);
}

void am_backward_fast(DType dt, const AmFast& p, void* workspace, unsigned* zeroed, cudaStream_t s) {
  if (p.R * p.C == 0) return;
  if (use_small(p)) return am_backward_small(dt, p, s);
  const bool reduce = am_reduces(p);
  if (use_flat(dt, p)) {
    const float* total = am_backward_flat(dt, p, reduce, workspace, zeroed, s);
    if (total) finish_scalars(dt, p, total, 1, s);
    return;
  }
  const bool vec = am_vectorizable(dt, p);
  float* partial = static_cast<float*>(workspace);
  int nchunks = 0;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      if (vec) {
        const Geometry g = bwd_geometry<T, V, ACT, FO>(p);
        nchunks = int(g.gy);
        am_bwd_k<T, V, ACT, FO><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk, partial);
      } else {
        const Geometry g = bwd_geometry<T, 1, ACT, FO>(p);
        nchunks = int(g.gy);
        am_bwd_k<T, 1, ACT, FO><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk, partial);
      }
    });
  });
  DLF_LAUNCHED("add_mul_activation backward kernel");
  if (!reduce) return;
  // Row gradients share one pass over the partials; a scalar one sums them all.
  ColsumDst rows[3];
  int nrows = 0;
  if (p.gxm == kRow) rows[nrows++] = ColsumDst{p.gx, p.gx_stride, 1.f};
  if (p.gym == kRow) rows[nrows++] = ColsumDst{p.gy, p.gy_stride, p.mult};
  if (p.gbm == kRow) rows[nrows++] = ColsumDst{p.gb, p.gb_stride, 1.f};
  if (nrows > 0) finish_colsums(dt, partial, nchunks, p.C, rows, nrows, s);
  finish_scalars(dt, p, partial, nchunks, s);
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
                     const View& yv, const void* b, const View& bv, void* dpre, bool dpre_f32, int act,
                     bool from_out, float mult, cudaStream_t s) {
  const int64_t n = gv.numel();
  if (n == 0) return;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto* d) {
      using S = std::remove_pointer_t<decltype(d)>;
      am_dpre_generic_k<T, S><<<grid_for(n), kThreads, 0, s>>>(
          static_cast<const T*>(g), gv, static_cast<const T*>(x), xv, static_cast<const T*>(y), yv,
          static_cast<const T*>(b), bv, d, act, from_out, mult, n);
    };
    if (dpre_f32) launch(static_cast<float*>(dpre));
    else launch(static_cast<T*>(dpre));
  });
  DLF_LAUNCHED("add_mul_activation generic backward kernel");
}

}  // namespace dlfuse_cuda

namespace dlfuse_cuda {

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
