#include "device.h"

#include <utility>

namespace dlfuse_conformance {

std::string describe_failure(dlfuse_status_t status) {
  const char* msg = dlfuse_last_error();
  return std::string(dlfuse_status_string(status)) + ": " + (msg && *msg ? msg : "(no message)");
}

std::string device_name(DLDevice dev) {
  const char* type = nullptr;
  switch (dev.device_type) {
    case kDLCPU: type = "cpu"; break;
    case kDLCUDA: type = "cuda"; break;
    case kDLOpenCL: type = "opencl"; break;
    case kDLWebGPU: type = "webgpu"; break;
    case kDLROCM: type = "rocm"; break;
    case kDLVulkan: type = "vulkan"; break;
    case kDLMetal: type = "metal"; break;
    default: break;
  }
  return (type ? std::string(type) : "dev" + std::to_string(int(dev.device_type))) + ":" +
         std::to_string(dev.device_id);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    reg_ = o.reg_;
    dev_ = o.dev_;
    ptr_ = o.ptr_;
    allocated_ = std::exchange(o.allocated_, false);
    o.ptr_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (allocated_) dlfuse_device_free(reg_, dev_, ptr_);  // nothing useful to do if it fails
  allocated_ = false;
  ptr_ = nullptr;
}

bool DeviceBuffer::allocate(dlfuse_registry_t reg, DLDevice dev, size_t nbytes, std::string* err) {
  reset();
  reg_ = reg;
  dev_ = dev;
  const dlfuse_status_t st = dlfuse_device_alloc(reg, dev, nbytes, &ptr_);
  if (st != DLFUSE_STATUS_OK) {
    *err = "device_alloc(" + std::to_string(nbytes) + " bytes): " + describe_failure(st);
    ptr_ = nullptr;
    return false;
  }
  allocated_ = true;
  return true;
}

bool DeviceBuffer::upload(const void* host, size_t nbytes, std::string* err) {
  const dlfuse_status_t st =
      dlfuse_device_copy(reg_, dev_, DLFUSE_COPY_HOST_TO_DEVICE, ptr_, 0, host, 0, nbytes, nullptr);
  if (st != DLFUSE_STATUS_OK) *err = "device_copy host->device: " + describe_failure(st);
  return st == DLFUSE_STATUS_OK;
}

bool DeviceBuffer::download(void* host, size_t nbytes, std::string* err, bool sync) const {
  dlfuse_status_t st = sync ? dlfuse_device_synchronize(reg_, dev_, nullptr) : DLFUSE_STATUS_OK;
  if (st == DLFUSE_STATUS_OK)
    st = dlfuse_device_copy(reg_, dev_, DLFUSE_COPY_DEVICE_TO_HOST, host, 0, ptr_, 0, nbytes, nullptr);
  if (st != DLFUSE_STATUS_OK) *err = "device_copy device->host: " + describe_failure(st);
  return st == DLFUSE_STATUS_OK;
}

}  // namespace dlfuse_conformance
