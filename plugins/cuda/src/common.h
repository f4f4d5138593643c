// Shared glue of the CUDA plugin: errors, the exception wall, device guard, DLTensor views.
#ifndef DLFUSE_CUDA_COMMON_H_
#define DLFUSE_CUDA_COMMON_H_

#include <cuda_runtime.h>
#include <dlfuse/plugin_kit.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlfuse_cuda {

constexpr int kMaxRank = 16;

// dtype of a call: 0 f32, 1 f16, 2 bf16.
enum class DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline int dsize(DType d) { return d == DType::kF32 ? 4 : 2; }

namespace kit = dlfuse::kit;
using kit::Error;

inline void throw_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  // A failed runtime call (say cudaMallocFromPoolAsync out of memory) also leaves its error
  // as the thread's last error; left there, the next call's launch check (DLF_LAUNCHED)
  // would report it again. Clear it (sticky device errors stay sticky regardless).
  (void)cudaGetLastError();
  const dlfuse_status_t st = e == cudaErrorMemoryAllocation ? DLFUSE_STATUS_OUT_OF_MEMORY : DLFUSE_STATUS_DEVICE_ERROR;
  throw Error(st, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
#define DLF_CUDA(call) ::dlfuse_cuda::throw_cuda((call), #call)
// After a launch: launch-configuration errors surface here (asynchronous faults later).
#define DLF_LAUNCHED(name) ::dlfuse_cuda::throw_cuda(cudaGetLastError(), name)

// False when the environment sets `name` to "0": the plugin's switches for turning a path
// off (DLFUSE_CUDA_AUTOTUNE, DLFUSE_CUDA_SMALL_GEMM, DLFUSE_CUDA_SMALL_BACKWARD). Callers
// read it once.
inline bool env_enabled(const char* name) {
  const char* v = std::getenv(name);
  return !(v && v[0] == '0' && v[1] == '\0');
}

inline dlfuse_status_t fail(char* err, size_t err_size, dlfuse_status_t status, const std::string& msg) {
  return kit::write_error("cuda", err, err_size, status, msg);
}

// Every entry point runs its body through the kit's exception wall.
template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return kit::guarded("cuda", err, err_size, std::forward<F>(body));
}

// Makes device_id current for the scope and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    DLF_CUDA(cudaGetDevice(&prev_));
    // Always: it also makes the device's primary context current on this thread, which
    // cuBLASLt (driver API) relies on.
    DLF_CUDA(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

// ---- DLTensor views --------------------------------------------------------------------

inline int64_t elem_stride(const DLTensor* t, int dim) {
  if (t->strides) return t->strides[dim];
  int64_t s = 1;
  for (int j = dim + 1; j < t->ndim; ++j) s *= t->shape[j];
  return s;
}

inline int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

// In integers: an empty tensor may have NULL data, and NULL + offset is undefined.
inline char* base_of(const DLTensor* t) {
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
}

// Strides of t aligned to the last ndim of `rank` dims; broadcast (size-1 or missing) dims get 0.
inline std::vector<int64_t> aligned_strides(const DLTensor* t, int rank) {
  std::vector<int64_t> out(size_t(rank), 0);
  for (int j = t->ndim - 1; j >= 0; --j) {
    const int i = rank - t->ndim + j;
    if (i >= 0 && t->shape[j] != 1) out[size_t(i)] = elem_stride(t, j);
  }
  return out;
}

// Shape of t aligned to `rank` dims (1 where missing).
inline std::vector<int64_t> aligned_shape(const DLTensor* t, int rank) {
  std::vector<int64_t> out(size_t(rank), 1);
  for (int j = 0; j < t->ndim; ++j) out[size_t(rank - t->ndim + j)] = t->shape[j];
  return out;
}

inline bool read_dtype(DLDataType dt, DType* out) {
  if (dt.lanes != 1) return false;
  if (dt.code == kDLFloat && dt.bits == 32) {
    *out = DType::kF32;
    return true;
  }
  if (dt.code == kDLFloat && dt.bits == 16) {
    *out = DType::kF16;
    return true;
  }
  if (dt.code == kDLBfloat && dt.bits == 16) {
    *out = DType::kBF16;
    return true;
  }
  return false;
}

}  // namespace dlfuse_cuda

#endif
