// The WebGPU plugin's descriptor and device services (plugins/common/src/device_plugin.hpp):
// what is WebGPU's own below. alloc() returns a WGPUBuffer of the device (what DLTensor.data
// holds on kDLWebGPU). A device has one queue, its WGPUQueue: the one stream a caller may
// pass (NULL means the same).
#include "device_plugin.hpp"
#include "ops.h"

namespace dlfuse_webgpu {
namespace {

struct Backend {
  static constexpr const char* kName = "webgpu";
  static constexpr const char* kVersion = DLFUSE_WEBGPU_VERSION;
  static constexpr int32_t kDeviceType = kDLWebGPU;
  using State = dlfuse_webgpu::State;
  using Device = dlfuse_webgpu::Device;

  static dlfuse_plugin::FusedOps ops() { return fused_ops(); }
  // A zero-byte request still gets a valid (16-byte) buffer: WebGPU binds no empty buffer.
  static void* alloc(Device& d, size_t nbytes) { return d.create_buffer(nbytes, true); }
  static void release(Device& d, void* p) { d.forget_buffer(static_cast<WGPUBuffer>(p)); }
  static WGPUQueue queue(Device& d, void* stream) {
    if (stream && stream != static_cast<void*>(d.queue))
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "stream: expected NULL or the WGPUQueue of " + d.label() +
                                                      " (WebGPU has one queue per device), got another");
    return d.queue;
  }
  // Only buffers this plugin allocated on the device have a size here.
  static uint64_t size_of(Device& d, const void* p) { return d.buffer_size(buf(p)); }
  static void write(Device& d, WGPUQueue, void* dst, size_t off, const void* host, size_t n) {
    d.write(buf(dst), off, host, n);
  }
  static void read(Device& d, WGPUQueue, const void* src, size_t off, void* host, size_t n) {
    d.read(buf(src), off, host, n);
  }
  // Ordered on the queue (an unaligned range goes through the host).
  static void copy(Device& d, WGPUQueue, const void* src, size_t src_off, void* dst, size_t dst_off, size_t n) {
    d.copy_device(buf(src), src_off, buf(dst), dst_off, n);
  }
  static void finish(Device& d, WGPUQueue) { d.wait_idle(); }

  static WGPUBuffer buf(const void* p) { return static_cast<WGPUBuffer>(const_cast<void*>(p)); }
};

}  // namespace
}  // namespace dlfuse_webgpu

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) {
  return &dlfuse_plugin::DevicePlugin<dlfuse_webgpu::Backend>::descriptor;
}
