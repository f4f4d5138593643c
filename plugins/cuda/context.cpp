#include "context.h"

#include <cstdint>

namespace dlfuse_cuda {

DeviceState& device_state(State* st, int device) {
  if (!st || device < 0 || device >= st->device_count)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "device_id " + std::to_string(device) + " out of range [0, " +
                    std::to_string(st ? st->device_count : 0) + ")");
  DeviceState& ds = *st->devices[size_t(device)];
  std::call_once(ds.init_once, [&] {
    try {
      if (cublasLtCreate(&ds.lt) != CUBLAS_STATUS_SUCCESS) {
        ds.lt = nullptr;
        throw Error(DLFUSE_STATUS_DEVICE_ERROR, "cublasLtCreate failed on device " + std::to_string(device));
      }
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypeNone;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      DLF_CUDA(cudaMemPoolCreate(&ds.pool, &props));
      // Keep freed temporaries in the pool: the next call reuses them without a driver call.
      uint64_t keep = UINT64_MAX;
      DLF_CUDA(cudaMemPoolSetAttribute(ds.pool, cudaMemPoolAttrReleaseThreshold, &keep));
    } catch (const std::exception& e) {
      ds.init_error = e.what();
    }
  });
  if (!ds.init_error.empty()) throw Error(DLFUSE_STATUS_DEVICE_ERROR, ds.init_error);
  return ds;
}

Temp::Temp(DeviceState& ds, size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  DLF_CUDA(cudaMallocFromPoolAsync(&ptr_, bytes, ds.pool, stream));
}

void Temp::reset(DeviceState& ds, size_t bytes) {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
  ptr_ = nullptr;
  if (bytes) DLF_CUDA(cudaMallocFromPoolAsync(&ptr_, bytes, ds.pool, stream_));
}

Temp::~Temp() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
}

LtPlan::~LtPlan() {
  for (auto l : {a, b, c, d})
    if (l) cublasLtMatrixLayoutDestroy(l);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

void destroy_state(State* st) noexcept {
  if (!st) return;
  for (auto& dsp : st->devices) {
    DeviceState& ds = *dsp;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(ds.id);
    ds.gemms.clear();
    if (ds.lt) cublasLtDestroy(ds.lt);
    if (ds.pool) cudaMemPoolDestroy(ds.pool);
    cudaSetDevice(prev);
  }
  delete st;
}

}  // namespace dlfuse_cuda
