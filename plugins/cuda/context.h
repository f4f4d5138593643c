// What the plugin keeps per device: the cuBLASLt handle, a stream-ordered memory pool for
// per-call temporaries (the cuBLASLt workspace among them), and the heuristic's answers.
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

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // cuBLAS's size for Hopper and later; ample before


struct DeviceState {
  int id = 0;
  // Non-empty: this build has no device code for the device (found at open()); its
  // kernels refuse calls with this reason, the device services still work.
  std::string no_kernels;
  std::once_flag init_once;
  std::string init_error;  // non-empty if lazy initialization failed
  cublasLtHandle_t lt = nullptr;
  cudaMemPool_t pool = nullptr;

  // cuBLASLt's chosen algorithm per problem key; relu_unsafe: every candidate's RELU
  // epilogue turned NaN into 0, so relu runs in our own pass for this problem.
  struct Algo {
    cublasLtMatmulHeuristicResult_t res;
    bool relu_unsafe;
  };
  std::mutex algo_mu;
  std::unordered_map<std::string, Algo> algos;
};

struct State {
  int device_count = 0;
  std::vector<std::unique_ptr<DeviceState>> devices;
};

// The device's state, initialized on first use (the device must be current). Throws on failure.
DeviceState& device_state(State* st, int device);

// A temporary from the device's pool, allocated and freed in the order of `stream`.
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
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// The call's cuBLASLt workspace: a stream-ordered allocation from the device's pool,
// freed in stream order when the call's work is enqueued. The pool keeps freed memory, so
// this costs no driver call after the first; and since reuse by another stream follows
// the pool's event dependencies, no workspace is ever in use by two streams at once,
// whatever their handles (cudaStreamPerThread, a destroyed stream's reused address).
class LtWorkspace {
 public:
  LtWorkspace(DeviceState& ds, cudaStream_t stream) : tmp_(ds, kLtWorkspaceBytes, stream) {}
  void* ptr() const { return tmp_.get(); }
  size_t size() const { return kLtWorkspaceBytes; }

 private:
  Temp tmp_;
};

void destroy_state(State* st) noexcept;

}  // namespace dlfuse_cuda

#endif
