// What the plugin keeps per device: the cuBLASLt handle, a stream-ordered memory pool for
// per-call temporaries (the cuBLASLt workspace among them), and per GEMM problem the chosen
// algorithm and reusable cuBLASLt descriptors.
#ifndef DLFUSE_CUDA_CONTEXT_H_
#define DLFUSE_CUDA_CONTEXT_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace dlfuse_cuda {

// The most workspace an algorithm may ask for (cuBLAS's size for Hopper and later). A call
// allocates what its algorithm needs; only the first call of a problem, which probes or
// times candidates, takes all of it.
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// One GEMM problem's cuBLASLt descriptor and layouts, made once per problem and reused
// (per call they cost 0.25-0.46 us of host time on the H100, docs/cuda.md). A plan serves
// one call at a time (the bias pointer is set per call).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan();
};

struct DeviceState {
  int id = 0;
  int cc = 0;  // compute capability, major * 10 + minor (set with the handle)
  // Non-empty: this build has no device code for the device (found at open()); its
  // kernels refuse calls with this reason, the device services still work.
  std::string no_kernels;
  std::once_flag init_once;
  std::string init_error;  // non-empty if lazy initialization failed
  cublasLtHandle_t lt = nullptr;
  cudaMemPool_t pool = nullptr;

  // Per GEMM problem key: the chosen algorithm (epi_unusable: no candidate's activation
  // epilogue kept NaN, or none has that epilogue here, so the activation runs in our own pass
  // for this problem), and the plans not in
  // use by a call right now (as many as calls of that problem ran at once, at most kIdlePlans).
  struct GemmEntry {
    bool chosen = false;
    bool epi_unusable = false;
    cublasLtMatmulHeuristicResult_t res{};
    std::vector<std::unique_ptr<LtPlan>> idle;
  };
  static constexpr size_t kIdlePlans = 8;
  std::mutex gemm_mu;
  std::unordered_map<std::string, GemmEntry> gemms;

  // Temporaries handed back, per stream (its never-reused ID): a later temporary on the same
  // stream takes one without a driver call (stream order makes that safe; another stream's
  // would need an event). Each call of a small problem otherwise pays an allocation and a
  // free per temporary, 4-5 us each on the H100 machine's host (docs/cuda.md).
  struct Block {
    size_t bytes;
    void* ptr;
  };
  static constexpr size_t kCachedBlockMax = size_t(64) << 20;  // larger ones go back to the pool
  static constexpr size_t kCachedTotalMax = size_t(512) << 20;
  std::mutex scratch_mu;
  std::unordered_map<unsigned long long, std::vector<Block>> scratch;
  size_t scratch_bytes = 0;
  // Per stream ID (under scratch_mu): a block of counters that is zero whenever the stream
  // is idle (zeroed_counters), kept until the plugin closes.
  static constexpr size_t kZeroedStreamsMax = 64;
  std::unordered_map<unsigned long long, void*> zeroed;
};

struct State {
  int device_count = 0;
  std::vector<std::unique_ptr<DeviceState>> devices;
};

// The device's state, initialized on first use (the device must be current). Throws on failure.
DeviceState& device_state(State* st, int device);

// kZeroedCounterBytes of counters for kernels on `stream` that leave them zero when they
// end (so the next call needs no memset): made zero once per stream, then only that
// stream's calls use them, in stream order. Null when none can be had: the stream is being
// captured (a graph replayed elsewhere must not share them), has no ID, kZeroedStreamsMax
// streams hold one already, or the block cannot be allocated.
constexpr size_t kZeroedCounterBytes = size_t(64) << 10;
void* zeroed_counters(DeviceState& ds, cudaStream_t stream);

// A temporary from the device's pool, allocated and freed in the order of `stream`.
// Outside graph capture, small ones come from and go back to the device's per-stream
// cache; under capture they are the graph's own (stream-ordered) allocations.
class Temp {
 public:
  Temp(DeviceState& ds, size_t bytes, cudaStream_t stream);
  ~Temp();
  // Frees what it held (stream-ordered) and takes a new allocation of `bytes`.
  void reset(DeviceState& ds, size_t bytes);
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  void* get() const { return ptr_; }

 private:
  void take(size_t bytes);
  void give_back();
  DeviceState* ds_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;            // the block's size (cached blocks are rounded up)
  unsigned long long sid_ = 0;  // the stream's ID, for a block of the cache
  bool cached_ = false;
  cudaStream_t stream_;
};

void destroy_state(State* st) noexcept;

}  // namespace dlfuse_cuda

#endif
