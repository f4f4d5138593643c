// The input gradient of a 1-wide layer, an outer product, with the activation gradient of
// the layer below in the same pass: dz[m, k] = act'(h[m, k]) * round(dy[m] * w[k]), and the
// column sums of dz per chunk of rows for the bias gradient. cuBLASLt's K = 1 GEMM, the
// activation-gradient pass and its finish were three launches for the same bytes.
#include <algorithm>

#include "device_math.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace dlfuse_cuda {
namespace {

constexpr int kOuterThreads = 256;

// A thread owns one column k for the rows of its block's chunk: h's rows and dz's are read
// and written by consecutive threads.
template <class T>
__global__ void __launch_bounds__(kOuterThreads)
    outer_act_grad_k(OuterActGrad p, int64_t rows_per_chunk) {
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= p.K) return;
  const T* dy = static_cast<const T*>(p.dy);
  const T* h = static_cast<const T*>(p.h);
  T* dz = static_cast<T*>(p.dz);
  const float wk = ldf(static_cast<const T*>(p.w) + k * p.w_stride);
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = std::min(p.M, r0 + rows_per_chunk);
  float sum = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = Cv<T>::ld(Cv<T>::st(ldf(dy + r * p.dy_stride) * wk));  // the GEMM's rounding
    const T v = Cv<T>::st(act_bwd_out(p.act, ldf(h + r * p.ldh + k), g));
    dz[r * p.K + k] = v;
    sum += Cv<T>::ld(v);
  }
  if (p.partial) p.partial[blockIdx.y * p.K + k] = sum;
}

}  // namespace

int outer_act_grad_chunks(int64_t M, int64_t K) {
  // Enough blocks for a few waves; at least 64 rows a chunk.
  const int64_t col_blocks = (K + kOuterThreads - 1) / kOuterThreads;
  const int64_t want = std::max<int64_t>(1, int64_t(num_sms()) * 4 / col_blocks);
  return int(std::max<int64_t>(1, std::min<int64_t>(want, (M + 63) / 64)));
}

void outer_act_grad(DType dt, const OuterActGrad& p, int chunks, cudaStream_t s) {
  if (p.M == 0 || p.K == 0) return;
  const int64_t rows_per_chunk = (p.M + chunks - 1) / chunks;
  const dim3 grid(unsigned((p.K + kOuterThreads - 1) / kOuterThreads), unsigned(chunks));
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    outer_act_grad_k<T><<<grid, kOuterThreads, 0, s>>>(p, rows_per_chunk);
  });
  DLF_LAUNCHED("outer_act_grad kernel");
}

}  // namespace dlfuse_cuda
