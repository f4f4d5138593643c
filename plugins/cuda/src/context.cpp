#include "context.h"

#include <cstdint>

namespace dlfuse_cuda {

DeviceState& device_state(State* st, int device) {
  if (!st || device < 0 || device >= st->device_count)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "device_id " + std::to_string(device) + " out of range [0, " +
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
      int major = 0, minor = 0;
      DLF_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      DLF_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
      ds.cc = major * 10 + minor;
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

Temp::Temp(DeviceState& ds, size_t bytes, cudaStream_t stream) : ds_(&ds), stream_(stream) { take(bytes); }

void Temp::reset(DeviceState& ds, size_t bytes) {
  give_back();
  ds_ = &ds;
  take(bytes);
}

Temp::~Temp() { give_back(); }

namespace {
// Cached blocks are rounded up to a power of two (at least 64 KiB) so that neighbouring
// sizes share them.
size_t block_size(size_t bytes) {
  size_t b = size_t(64) << 10;
  while (b < bytes) b <<= 1;
  return b;
}

// The stream's ID, when it has one and is not being captured. Not while capturing:
// cudaStreamGetId there invalidates the capture (measured: every later call of the capture
// failed with cudaErrorStreamCaptureInvalidated).
bool idle_stream_id(cudaStream_t stream, unsigned long long* sid) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  const cudaError_t e1 = cudaStreamIsCapturing(stream, &cs);
  const bool idle = e1 == cudaSuccess && cs == cudaStreamCaptureStatusNone;
  const cudaError_t e2 = idle ? cudaStreamGetId(stream, sid) : e1;
  // A failed query (e.g. the legacy stream while another captures) means: no; its error is
  // ours to clear, and only then (a caller's pending error is not ours).
  if (e2 != cudaSuccess) cudaGetLastError();
  return idle && e2 == cudaSuccess;
}
}  // namespace

void* zeroed_counters(DeviceState& ds, cudaStream_t stream) {
  unsigned long long sid = 0;
  if (!idle_stream_id(stream, &sid)) return nullptr;
  std::lock_guard<std::mutex> lk(ds.scratch_mu);
  auto it = ds.zeroed.find(sid);
  if (it != ds.zeroed.end()) return it->second;
  if (ds.zeroed.size() >= DeviceState::kZeroedStreamsMax) return nullptr;
  // Out of memory here is not the call's failure: it counts in its workspace instead.
  void* p = nullptr;
  if (cudaMallocFromPoolAsync(&p, kZeroedCounterBytes, ds.pool, stream) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaMemsetAsync(p, 0, kZeroedCounterBytes, stream) != cudaSuccess) {
    cudaGetLastError();
    cudaFreeAsync(p, stream);
    return nullptr;
  }
  ds.zeroed.emplace(sid, p);
  return p;
}

void Temp::take(size_t bytes) {
  ptr_ = nullptr;
  cached_ = false;
  if (bytes == 0) return;
  const bool cacheable = bytes <= DeviceState::kCachedBlockMax && idle_stream_id(stream_, &sid_);
  if (!cacheable) {
    bytes_ = bytes;
    DLF_CUDA(cudaMallocFromPoolAsync(&ptr_, bytes, ds_->pool, stream_));
    return;
  }
  bytes_ = block_size(bytes);
  {
    std::lock_guard<std::mutex> lk(ds_->scratch_mu);
    auto it = ds_->scratch.find(sid_);
    if (it != ds_->scratch.end()) {
      auto& v = it->second;
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i].bytes == bytes_) {
          ptr_ = v[i].ptr;
          v[i] = v.back();
          v.pop_back();
          ds_->scratch_bytes -= bytes_;
          break;
        }
    }
  }
  if (!ptr_) DLF_CUDA(cudaMallocFromPoolAsync(&ptr_, bytes_, ds_->pool, stream_));
  cached_ = true;
}

void Temp::give_back() {
  if (!ptr_) return;
  void* p = ptr_;
  ptr_ = nullptr;
  if (cached_) {
    std::lock_guard<std::mutex> lk(ds_->scratch_mu);
    if (ds_->scratch_bytes + bytes_ <= DeviceState::kCachedTotalMax) {
      ds_->scratch[sid_].push_back(DeviceState::Block{bytes_, p});
      ds_->scratch_bytes += bytes_;
      return;
    }
  }
  cudaFreeAsync(p, stream_);
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
    // The cached blocks' and counter blocks' last uses are done.
    if (!ds.scratch.empty() || !ds.zeroed.empty()) cudaDeviceSynchronize();
    for (auto& kv : ds.scratch)
      for (const auto& b : kv.second) cudaFree(b.ptr);
    ds.scratch.clear();
    for (auto& kv : ds.zeroed) cudaFree(kv.second);
    ds.zeroed.clear();
    if (ds.lt) cublasLtDestroy(ds.lt);
    if (ds.pool) cudaMemPoolDestroy(ds.pool);
    cudaSetDevice(prev);
  }
  delete st;
}

}  // namespace dlfuse_cuda
