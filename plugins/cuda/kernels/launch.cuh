// Host-side launch helpers shared by the kernel files: block and grid sizes, the
// multiprocessor count and occupancy (read at run time, per device), and the switches from
// a run-time dtype or activation to a template instantiation.
#ifndef DLFUSE_CUDA_LAUNCH_CUH_
#define DLFUSE_CUDA_LAUNCH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels.h"

namespace dlfuse_cuda {

constexpr int kThreads = 256;

inline int num_sms() {
  static std::atomic<int> cache[64];  // per device; 0 = not read yet
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (dev >= 0 && dev < 64 && (n = cache[dev].load(std::memory_order_relaxed)) > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) return 132;
  if (dev >= 0 && dev < 64) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t cap = int64_t(num_sms()) * 16;
  int64_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;  // grid-stride loops cover the rest
  return unsigned(b < 1 ? 1 : b);
}

template <class F>
void by_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: f(float{}); break;
    case DType::kF16: f(__half{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
  }
}

// The activation as a compile-time constant, so a fast-path kernel holds one formula.
template <int A>
struct ActC {
  static constexpr int value = A;
};
template <class F>
void by_act(int act, F&& f) {
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
template <class F>
void by_act_out(int act, F&& f) {
  switch (act) {
    case DLFUSE_ACT_RELU: f(ActC<DLFUSE_ACT_RELU>{}); break;
    case DLFUSE_ACT_SIGMOID: f(ActC<DLFUSE_ACT_SIGMOID>{}); break;
    case DLFUSE_ACT_TANH: f(ActC<DLFUSE_ACT_TANH>{}); break;
    default: f(ActC<DLFUSE_ACT_IDENTITY>{}); break;
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Grid geometry of the fast path: threads over column vectors, blockIdx.y over row chunks,
// about 8 blocks of 256 threads per multiprocessor in all.
struct Geometry {
  int64_t Cv = 0, rows_per_chunk = 1;
  unsigned bx = kThreads, gx = 1, gy = 1;
};

// blocks_per_sm: how many blocks of the kernel fit on a multiprocessor at once, so that the
// grid is one full wave (no tail of a partial wave).
inline Geometry geometry(int64_t R, int64_t C, int V, int blocks_per_sm) {
  Geometry g;
  g.Cv = C / V;
  g.bx = unsigned(std::min<int64_t>(kThreads, ((g.Cv + 31) / 32) * 32));
  g.gx = unsigned((g.Cv + g.bx - 1) / g.bx);
  const int64_t target = int64_t(num_sms()) * std::max(1, blocks_per_sm);
  int64_t chunks = std::max<int64_t>(1, target / g.gx);             // floor: never a partial second wave
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, R / 8));  // >= 8 rows a chunk
  chunks = std::min<int64_t>(chunks, 65535);
  g.rows_per_chunk = (R + chunks - 1) / chunks;
  if (g.rows_per_chunk < 1) g.rows_per_chunk = 1;
  g.gy = unsigned(std::max<int64_t>(1, (R + g.rows_per_chunk - 1) / g.rows_per_chunk));
  return g;
}

// Resident blocks of `kernel` per multiprocessor at the block size geometry() picks.
template <class K>
int blocks_per_sm(K kernel, int64_t Cv) {
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

}  // namespace dlfuse_cuda

#endif
