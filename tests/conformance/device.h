// Device memory through the registry's device services, so the suite works the same for
// host-memory, CUDA and OpenCL plugins. A device pointer is never dereferenced here.
#ifndef DLFUSE_CONFORMANCE_DEVICE_H_
#define DLFUSE_CONFORMANCE_DEVICE_H_

#include <dlfuse/dlfuse.h>

#include <string>

namespace dlfuse_conformance {

// "status name: last error" of the calling thread, for a call that just failed.
std::string describe_failure(dlfuse_status_t status);
std::string device_name(DLDevice dev);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer() { reset(); }

  // Each returns false and sets *err on failure.
  bool allocate(dlfuse_registry_t reg, DLDevice dev, size_t nbytes, std::string* err);
  bool upload(const void* host, size_t nbytes, std::string* err);
  // Synchronizes the default stream first unless `sync` is false.
  bool download(void* host, size_t nbytes, std::string* err, bool sync = true) const;
  void* ptr() const { return ptr_; }
  void reset();

 private:
  dlfuse_registry_t reg_ = nullptr;
  DLDevice dev_{kDLCPU, 0};
  void* ptr_ = nullptr;
  bool allocated_ = false;
};

}  // namespace dlfuse_conformance

#endif
