// A layer's dZ from its output gradient in one pass over rows, with the column sums of dZ per
// chunk of rows for its bias gradient:
//   dz[m, k] = act'(h[m, k]) * g[m, k]                    (the gradient given whole), or
//   dz[m, k] = act'(h[m, k]) * round(dy[m] * w[k])        (through a 1-wide layer above: its
//                                                          input gradient, an outer product).
// The outer form replaces cuBLASLt's K = 1 GEMM, the activation-gradient pass and its finish:
// three launches for the same bytes. The sums are finished by finish_colsum_jobs, with the
// other layers' in one launch.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_math.cuh"
#include "kernels.h"
#include "launch.cuh"
#include "vec16.cuh"

namespace dlfuse_cuda {
namespace {

constexpr int kRowsThreads = 256;
constexpr int kRowsUnroll = 4;  // rows a thread has in flight together

// A thread owns V consecutive columns (16 bytes where the rows allow); a block's blockDim.y
// rows of threads take its chunk's rows in turn, kRowsUnroll at a time with their loads issued
// before their arithmetic (one row per thread is too little to hide the memory latency), and
// add up their column sums in shared memory at the end.
template <class T, int V, bool OUTER>
__global__ void __launch_bounds__(kRowsThreads) act_grad_rows_k(ActGradRows p, int64_t rows_per_chunk) {
  __shared__ float red[kRowsThreads * V];
  const int64_t k = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V;
  const bool active = k < p.K;
  const T* __restrict__ g = static_cast<const T*>(p.g);
  const T* __restrict__ h = static_cast<const T*>(p.h);
  T* __restrict__ dz = static_cast<T*>(p.dz);
  float wk[V], sum[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    wk[i] = OUTER && active ? ldf(static_cast<const T*>(p.w) + (k + i) * p.w_stride) : 0.f;
    sum[i] = 0.f;
  }
  const int64_t r1 = std::min(p.M, (blockIdx.y + 1) * rows_per_chunk);
  const int64_t step = int64_t(blockDim.y);
  for (int64_t r = blockIdx.y * rows_per_chunk + threadIdx.y; active && r < r1; r += step * kRowsUnroll) {
    Pack<T, V> hv[kRowsUnroll], gv[kRowsUnroll];
#pragma unroll
    for (int u = 0; u < kRowsUnroll; ++u) {
      const int64_t row = r + u * step;
      if (row >= r1) break;
      if constexpr (OUTER)
        gv[u].fill(ldf(g + row * p.ldg));
      else
        gv[u].load(g + row * p.ldg + k);
      if (h)
        hv[u].load(h + row * p.ldh + k);
      else
        hv[u].fill(0.f);  // IDENTITY reads no output
    }
#pragma unroll
    for (int u = 0; u < kRowsUnroll; ++u) {
      const int64_t row = r + u * step;
      if (row >= r1) break;
      Pack<T, V> d;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float gi = OUTER ? Cv<T>::ld(Cv<T>::st(gv[u].f[i] * wk[i])) : gv[u].f[i];  // the GEMM's rounding
        d.f[i] = Cv<T>::ld(Cv<T>::st(act_bwd_out(p.act, hv[u].f[i], gi)));
        sum[i] += d.f[i];
      }
      d.store(dz + row * p.K + k, /*cached=*/true);  // the GEMMs read dz next
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
struct RowsShape {
  int V = 1;
  dim3 block, grid;
  int64_t rows_per_chunk = 0;
};

RowsShape shape_of(DType dt, const ActGradRows& p) {
  RowsShape o;
  const int vec = 16 / dsize(dt);
  const bool g_vec = p.w || (p.ldg % vec == 0 && aligned16(p.g));
  const bool h_vec = !p.h || (p.ldh % vec == 0 && aligned16(p.h));
  if (p.K % vec == 0 && g_vec && h_vec && aligned16(p.dz)) o.V = vec;
  const int64_t threads_per_row = (p.K + o.V - 1) / o.V;
  // Narrow rows share a warp (K = 128 in bfloat16: two rows of 16 threads) rather than idle half of it.
  const int tx = int(std::min<int64_t>(kRowsThreads, threads_per_row));
  const int ty = kRowsThreads / tx;
  const int64_t col_blocks = (threads_per_row + tx - 1) / tx;
  // About four blocks a multiprocessor in all, and kRowsUnroll rows a thread at least.
  const int64_t rows_per_block_round = int64_t(ty) * kRowsUnroll;
  const int64_t most = std::max<int64_t>(1, (p.M + rows_per_block_round - 1) / rows_per_block_round);
  const int64_t chunks = std::max<int64_t>(1, std::min(most, int64_t(num_sms()) * 4 / col_blocks));
  o.rows_per_chunk = (p.M + chunks - 1) / chunks;
  o.block = dim3(unsigned(tx), unsigned(ty));
  o.grid = dim3(unsigned(col_blocks), unsigned((p.M + o.rows_per_chunk - 1) / o.rows_per_chunk));
  return o;
}

}  // namespace

int act_grad_rows_chunks(DType dt, const ActGradRows& p) {
  return p.M == 0 || p.K == 0 ? 0 : int(shape_of(dt, p).grid.y);
}

void act_grad_rows(DType dt, const ActGradRows& p, cudaStream_t s) {
  if (p.M == 0 || p.K == 0) return;
  const RowsShape o = shape_of(dt, p);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int kV = 16 / sizeof(T);
    auto go = [&](auto outer) {
      constexpr bool kOuter = decltype(outer)::value;
      if (o.V == kV)
        act_grad_rows_k<T, kV, kOuter><<<o.grid, o.block, 0, s>>>(p, o.rows_per_chunk);
      else
        act_grad_rows_k<T, 1, kOuter><<<o.grid, o.block, 0, s>>>(p, o.rows_per_chunk);
    };
    if (p.w)
      go(std::true_type{});
    else
      go(std::false_type{});
  });
  DLF_LAUNCHED("act_grad_rows kernel");
}

}  // namespace dlfuse_cuda
