// The WebGPU plugin's descriptor, kernel table and device services.
//
// Memory: alloc() returns a WGPUBuffer of the device (what DLTensor.data holds on
// kDLWebGPU); offsets travel separately (copy()'s offsets, DLTensor.byte_offset). A device
// has one queue, its WGPUQueue: the stream a caller may pass (NULL means the same).
#include <new>

#include "kernel_table.h"
#include "ops.h"

namespace dlfuse_webgpu {
namespace {

dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept;
dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept;

// mlp and mlp_backward: a call of the layer kernels per layer, the backward's scratch from alloc().
const dlfuse_plugin::Composition kComposition = {
    {matmul_add_activation, matmul_add_activation_backward}, alloc, release, "webgpu"};

dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void** state, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!state) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "state: expected an out-pointer, got NULL");
    *state = nullptr;
    auto s = std::make_unique<State>();
    open_devices(s.get());
    // float16 is declared when every device of the plugin has shader-f16 (a call on a device
    // without it would have nothing to run); pick adapters with DLFUSE_WEBGPU_ADAPTER.
    bool fp16 = true;
    for (const auto& d : s->devices) fp16 = fp16 && d->fp16;
    s->kernels = dlfuse_plugin::fused_kernel_table(
        kDLWebGPU, fp16,
        {matmul_add_relu, matmul_add_relu_backward, add_mul_activation, add_mul_activation_backward,
         matmul_add_activation, matmul_add_activation_backward, matmul_add_residual, matmul_add_residual_backward,
         &kComposition});
    *state = s.release();
    return DLFUSE_STATUS_OK;
  });
}

void close_plugin(void* state) noexcept {
  try {
    delete static_cast<State*>(state);
  } catch (...) {  // a release that throws must not leave the library
  }
}

dlfuse_status_t get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num, char* err,
                            size_t err_size) noexcept {
  if (!state)
    return kit::write_error("webgpu", err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                            "state: expected the plugin's, got NULL");
  return static_cast<const State*>(state)->kernels->get(kernels, num, "webgpu", err, err_size);
}

State& state_of(void* state) {
  if (!state) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "state: expected the plugin's, got NULL");
  return *static_cast<State*>(state);
}

dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!count) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "count: expected an out-pointer, got NULL");
    *count = int32_t(state_of(state).devices.size());
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!ptr) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "ptr: expected an out-pointer, got NULL");
    *ptr = nullptr;
    Device& d = state_of(state).device(device_id);
    // A zero-byte request still gets a valid (16-byte) buffer: WebGPU binds no empty buffer.
    *ptr = d.create_buffer(nbytes, true);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    Device& d = state_of(state).device(device_id);
    if (!ptr) return DLFUSE_STATUS_OK;
    d.forget_buffer(static_cast<WGPUBuffer>(ptr));
    return DLFUSE_STATUS_OK;
  });
}

void check_stream(Device& d, void* stream) {
  if (stream && stream != static_cast<void*>(d.queue))
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "stream: expected NULL or the WGPUQueue of " + d.label() +
                                                    " (WebGPU has one queue per device), got another");
}

// A device-side range of a copy: the buffer must be this device's and hold it.
WGPUBuffer device_range(Device& d, const void* p, size_t offset, size_t nbytes, const char* name) {
  WGPUBuffer b = static_cast<WGPUBuffer>(const_cast<void*>(p));
  const uint64_t size = d.buffer_size(b);
  if (size == 0)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                std::string(name) + ": expected a buffer allocated on " + d.label() + ", got another pointer");
  if (offset > size || nbytes > size - offset)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string(name) + ": expected offset + nbytes <= the buffer's " +
                                                    std::to_string(size) + " bytes, got " + std::to_string(offset) +
                                                    " + " + std::to_string(nbytes));
  return b;
}

dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                     const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                     size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    Device& d = state_of(state).device(device_id);
    check_stream(d, stream);
    if (kind < DLFUSE_COPY_HOST_TO_DEVICE || kind > DLFUSE_COPY_DEVICE_TO_DEVICE)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "kind: expected 1..3, got " + std::to_string(int(kind)));
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string(dst ? "src" : "dst") + ": expected a pointer, got NULL");
    switch (kind) {
      case DLFUSE_COPY_HOST_TO_DEVICE:
        d.write(device_range(d, dst, dst_offset, nbytes, "dst"), dst_offset, static_cast<const char*>(src) + src_offset,
                nbytes);
        break;
      case DLFUSE_COPY_DEVICE_TO_HOST:
        d.read(device_range(d, src, src_offset, nbytes, "src"), src_offset, static_cast<char*>(dst) + dst_offset,
               nbytes);
        break;
      default:  // ordered on the queue, not waited for (unless unaligned: through the host)
        d.copy_device(device_range(d, src, src_offset, nbytes, "src"), src_offset,
                      device_range(d, dst, dst_offset, nbytes, "dst"), dst_offset, nbytes);
        break;
    }
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    Device& d = state_of(state).device(device_id);
    check_stream(d, stream);
    d.wait_idle();
    return DLFUSE_STATUS_OK;
  });
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "webgpu",
                                 DLFUSE_WEBGPU_VERSION,
                                 kDLWebGPU,
                                 open_plugin,
                                 close_plugin,
                                 get_kernels,
                                 device_count,
                                 alloc,
                                 release,
                                 copy,
                                 synchronize};

}  // namespace
}  // namespace dlfuse_webgpu

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &dlfuse_webgpu::kPlugin; }
