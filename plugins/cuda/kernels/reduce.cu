// Reductions: a gradient summed over the dims its operand was broadcast along (reduce_to,
// any strides, double accumulation), and column sums of a compact [R, C] matrix in two
// steps (colsum_partials: a float partial row per chunk of rows; finish_colsum(s): the
// partial rows added into up to three destinations, or into one scalar).
#include <algorithm>
#include <type_traits>

#include "device_math.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace dlfuse_cuda {
namespace {

constexpr int kReduceThreads = 256;  // a power of two: reduce_to_block_k halves it

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
__global__ void reduce_to_block_k(const S* src, View full, T* dst, View dv, RedDims red, float scale, int64_t n_out,
                                  int64_t n_red) {
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

// A block of kFinishThreads threads owns blockDim.x columns: its rows of threads split the
// partial rows among them, four loads in flight each, then a tree over the rows sums them.
// The width is picked per call so that the grid covers every multiprocessor: 32 columns a
// block left most of the GPU idle for 1024 columns (H200, DLRM's MLP backward: 49 us of
// finishing a step, now 36). A float4 a thread measured slower (44 us).
constexpr int kFinishThreads = 1024;

// The sum of column c of partial [nchunks, C] (0 for c >= C), for the threads of row 0 of
// the block; every thread of the block calls it.
__device__ float column_sum(const float* partial, int nchunks, int64_t C, int64_t c) {
  __shared__ float lane[kFinishThreads];
  const int w = int(blockDim.x), h = int(blockDim.y), x = int(threadIdx.x), y = int(threadIdx.y);
  float acc = 0.f;
  if (c < C) {
    int k = y;
    for (; k + 3 * h < nchunks; k += 4 * h) {
      float r[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) r[u] = partial[(k + u * h) * C + c];
      acc += (r[0] + r[1]) + (r[2] + r[3]);
    }
    for (; k < nchunks; k += h) acc += partial[k * C + c];
  }
  float* mine = lane + y * w + x;
  *mine = acc;
  __syncthreads();
  for (int half = h / 2; half > 0; half /= 2) {
    if (y < half) *mine += mine[half * w];
    __syncthreads();
  }
  return *mine;
}

template <class T>
__global__ void finish_colsums_k(const float* partial, int nchunks, int64_t C, ColsumDsts dst) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const float sum = column_sum(partial, nchunks, C, c);
  if (threadIdx.y != 0 || c >= C) return;
  for (int i = 0; i < dst.n; ++i) static_cast<T*>(dst.d[i].p)[c * dst.d[i].stride] = Cv<T>::st(dst.d[i].scale * sum);
}

struct ColsumJobTable {
  ColsumJob job[kMaxColsumJobs];
  int first_block[kMaxColsumJobs + 1];  // job i owns blocks [first_block[i], first_block[i + 1])
  int n;
};

template <class T>
__global__ void finish_colsum_jobs_k(ColsumJobTable t) {
  int i = 0;
  while (i + 1 < t.n && int(blockIdx.x) >= t.first_block[i + 1]) ++i;
  const ColsumJob& j = t.job[i];
  const int64_t c = (int64_t(blockIdx.x) - t.first_block[i]) * blockDim.x + threadIdx.x;
  const float sum = column_sum(j.partial, j.nchunks, j.C, c);
  if (threadIdx.y == 0 && c < j.C) static_cast<T*>(j.dst)[c * j.stride] = Cv<T>::st(sum);
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

}  // namespace

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
        reduce_to_k<T, S><<<grid_for(n_out), kThreads, 0, s>>>(typed_src, full, static_cast<T*>(dst), dst_aligned, red,
                                                               scale, n_out, n_red);
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
    // 32 columns a block (whole 128-byte lines a warp) while the grid still fills the GPU,
    // else narrower, down to 8 (32-byte sectors).
    int w = 32;
    while (w > 8 && (C + w - 1) / w < num_sms()) w /= 2;
    const unsigned blocks = unsigned((C + w - 1) / w);
    finish_colsums_k<T><<<blocks, dim3(unsigned(w), unsigned(kFinishThreads / w)), 0, s>>>(partial, nchunks, C, d);
  });
  DLF_LAUNCHED("finish_colsums kernel");
}

void finish_colsum_jobs(DType dt, const ColsumJob* jobs, int n, cudaStream_t s) {
  if (n <= 0) return;
  if (n > kMaxColsumJobs) throw Error(DLFUSE_STATUS_INTERNAL, "finish_colsum_jobs: more jobs than kMaxColsumJobs");
  int64_t columns = 0;
  for (int i = 0; i < n; ++i) columns += jobs[i].C;
  int w = 32;  // as finish_colsums: narrower while the grid would leave multiprocessors idle
  while (w > 8 && (columns + w - 1) / w < num_sms()) w /= 2;
  ColsumJobTable t{};
  t.n = n;
  for (int i = 0; i < n; ++i) {
    t.job[i] = jobs[i];
    t.first_block[i + 1] = t.first_block[i] + int((jobs[i].C + w - 1) / w);
  }
  by_dtype(dt, [&](auto z) {
    using T = decltype(z);
    finish_colsum_jobs_k<T><<<unsigned(t.first_block[n]), dim3(unsigned(w), unsigned(kFinishThreads / w)), 0, s>>>(t);
  });
  DLF_LAUNCHED("finish_colsum_jobs kernel");
}

}  // namespace dlfuse_cuda
