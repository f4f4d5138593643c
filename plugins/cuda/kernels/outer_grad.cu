// The input gradient of a 1-wide layer, an outer product, with the activation gradient of
// the layer below in the same pass: dz[m, k] = act'(h[m, k]) * round(dy[m] * w[k]), and the
// column sums of dz per chunk of rows for the bias gradient. cuBLASLt's K = 1 GEMM, the
// activation-gradient pass and its finish were three launches for the same bytes.
#include <algorithm>
#include <cstdint>

#include "device_math.cuh"
#include "kernels.h"
#include "launch.cuh"
#include "vec16.cuh"

namespace dlfuse_cuda {
namespace {

constexpr int kOuterThreads = 256;
constexpr int kOuterUnroll = 4;  // rows a thread has in flight together

// A thread owns V consecutive columns (16 bytes where h's and dz's rows allow); a block's
// blockDim.y rows of threads take its chunk's rows in turn, kOuterUnroll at a time with their
// loads issued before their arithmetic (one row per thread is too little to hide the memory
// latency), and add up their column sums in shared memory at the end.
template <class T, int V>
__global__ void __launch_bounds__(kOuterThreads)
    outer_act_grad_k(OuterActGrad p, int64_t rows_per_chunk) {
  __shared__ float red[kOuterThreads * V];
  const int64_t k = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V;
  const bool active = k < p.K;
  const T* __restrict__ dy = static_cast<const T*>(p.dy);
  const T* __restrict__ h = static_cast<const T*>(p.h);
  T* __restrict__ dz = static_cast<T*>(p.dz);
  float wk[V], sum[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    wk[i] = active ? ldf(static_cast<const T*>(p.w) + (k + i) * p.w_stride) : 0.f;
    sum[i] = 0.f;
  }
  const int64_t r1 = std::min(p.M, (blockIdx.y + 1) * rows_per_chunk);
  const int64_t step = int64_t(blockDim.y);
  for (int64_t r = blockIdx.y * rows_per_chunk + threadIdx.y; active && r < r1; r += step * kOuterUnroll) {
    Pack<T, V> hv[kOuterUnroll];
    float g[kOuterUnroll];
#pragma unroll
    for (int u = 0; u < kOuterUnroll; ++u) {
      if (r + u * step >= r1) break;
      g[u] = ldf(dy + (r + u * step) * p.dy_stride);
      hv[u].load(h + (r + u * step) * p.ldh + k);
    }
#pragma unroll
    for (int u = 0; u < kOuterUnroll; ++u) {
      if (r + u * step >= r1) break;
      Pack<T, V> d;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float gi = Cv<T>::ld(Cv<T>::st(g[u] * wk[i]));  // the GEMM's rounding
        d.f[i] = Cv<T>::ld(Cv<T>::st(act_bwd_out(p.act, hv[u].f[i], gi)));
        sum[i] += d.f[i];
      }
      d.store(dz + (r + u * step) * p.K + k, /*cached=*/true);  // the GEMMs read dz next
    }
  }
  if (!p.partial) return;  // the same for the whole block
  float* mine = red + (threadIdx.y * blockDim.x + threadIdx.x) * V;
#pragma unroll
  for (int i = 0; i < V; ++i) mine[i] = sum[i];
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (unsigned y = 1; y < blockDim.y; ++y)
#pragma unroll
    for (int i = 0; i < V; ++i) sum[i] += red[(y * blockDim.x + threadIdx.x) * V + i];
#pragma unroll
  for (int i = 0; i < V; ++i) p.partial[blockIdx.y * p.K + k + i] = sum[i];
}

// How a call is cut: columns per thread, the block's shape, and its chunks of rows.
struct OuterShape {
  int V = 1;
  dim3 block, grid;
  int64_t rows_per_chunk = 0;
};

OuterShape shape_of(DType dt, const OuterActGrad& p) {
  OuterShape o;
  const int vec = 16 / dsize(dt);
  if (p.K % vec == 0 && p.ldh % vec == 0 && aligned16(p.h) && aligned16(p.dz)) o.V = vec;
  const int64_t threads_per_row = (p.K + o.V - 1) / o.V;
  const int tx = int(std::min<int64_t>(kOuterThreads, (threads_per_row + 31) / 32 * 32));
  const int ty = kOuterThreads / tx;
  const int64_t col_blocks = (threads_per_row + tx - 1) / tx;
  // About four blocks a multiprocessor in all, and kOuterUnroll rows a thread at least.
  const int64_t most = std::max<int64_t>(1, (p.M + int64_t(ty) * kOuterUnroll - 1) / (int64_t(ty) * kOuterUnroll));
  const int64_t chunks = std::max<int64_t>(1, std::min(most, int64_t(num_sms()) * 4 / col_blocks));
  o.rows_per_chunk = (p.M + chunks - 1) / chunks;
  o.block = dim3(unsigned(tx), unsigned(ty));
  o.grid = dim3(unsigned(col_blocks), unsigned((p.M + o.rows_per_chunk - 1) / o.rows_per_chunk));
  return o;
}

}  // namespace

int outer_act_grad_chunks(DType dt, const OuterActGrad& p) {
  return p.M == 0 || p.K == 0 ? 0 : int(shape_of(dt, p).grid.y);
}

void outer_act_grad(DType dt, const OuterActGrad& p, cudaStream_t s) {
  if (p.M == 0 || p.K == 0) return;
  const OuterShape o = shape_of(dt, p);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int kV = 16 / sizeof(T);
    if (o.V == kV) outer_act_grad_k<T, kV><<<o.grid, o.block, 0, s>>>(p, o.rows_per_chunk);
    else outer_act_grad_k<T, 1><<<o.grid, o.block, 0, s>>>(p, o.rows_per_chunk);
  });
  DLF_LAUNCHED("outer_act_grad kernel");
}

}  // namespace dlfuse_cuda
