// The descriptor and device services of a plugin whose devices own their buffers (OpenCL's
// cl_mem, WebGPU's WGPUBuffer): every entry point's argument checks, messages and exception
// wall written once. A backend says only how its devices open, allocate, copy and wait, so
// the OpenCL and WebGPU plugins cannot drift apart in what they accept or how they answer.
//
// Memory: alloc() returns the backend's buffer handle (what DLTensor.data holds on that
// device type); offsets travel separately (copy()'s offsets, DLTensor.byte_offset).
//
// A backend B is a struct of statics (every one may throw dlfuse::kit::Error):
//   kName, kVersion, kDeviceType         the descriptor's name, version and DLPack device type
//   State                                devices (unique_ptr<Device>) and kernels, the plugin's
//                                        state; device(id) throws INVALID_ARGUMENT for a bad id;
//                                        open_devices(State*) in its namespace fills devices,
//                                        and throws UNAVAILABLE when none is usable
//   Device, Queue                        one device (its `fp16`: it runs the float16 kernels);
//                                        the queue a call runs on
//   ops()                                its eight entry points (DLFUSE_PLUGIN_FUSED_OPS)
//   alloc(Device&, nbytes)               a buffer of at least nbytes (0 included)
//   release(Device&, void* buffer)       the buffer, allocated by alloc() on that device
//   queue(Device&, void* stream)         the queue of `stream` (NULL: the device's default);
//                                        throws INVALID_ARGUMENT naming what it got
//   size_of(Device&, const void* buffer) the bytes of a buffer of this device, 0 if it is not one
//   write(Device&, Queue, void* buffer, size_t offset, const void* host, size_t n)  done on return
//   read(Device&, Queue, const void* buffer, size_t offset, void* host, size_t n)   done on return
//   copy(Device&, Queue, const void* src, size_t src_offset, void* dst, size_t dst_offset,
//        size_t n)                       ordered on the queue, not waited for
//   finish(Device&, Queue)               waits for the queue's work
#ifndef DLFUSE_PLUGIN_COMMON_DEVICE_PLUGIN_HPP_
#define DLFUSE_PLUGIN_COMMON_DEVICE_PLUGIN_HPP_

#include <dlfuse/plugin_kit.hpp>

#include <memory>
#include <string>

#include "kernel_table.h"

namespace dlfuse_plugin {

template <class B>
struct DevicePlugin {
  using State = typename B::State;
  using Device = typename B::Device;
  using Error = dlfuse::kit::Error;

  template <class F>
  static dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
    return dlfuse::kit::guarded(B::kName, err, err_size, std::forward<F>(body));
  }

  static State& state_of(void* state) {
    if (!state) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "state: expected the plugin's, got NULL");
    return *static_cast<State*>(state);
  }

  static void out_pointer(const void* p, const char* name) {
    if (!p) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string(name) + ": expected an out-pointer, got NULL");
  }

  static dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void** state, char* err, size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      out_pointer(state, "state");
      *state = nullptr;
      auto s = std::make_unique<State>();
      open_devices(s.get());  // the backend's, found by argument-dependent lookup
      // float16 is declared when every device of the plugin has it (a call on a device
      // without it would have nothing to run); the backend's selector variable picks devices.
      bool fp16 = true;
      for (const auto& d : s->devices) fp16 = fp16 && d->fp16;
      // mlp and mlp_backward: a call of the layer kernels per layer, the backward's scratch
      // from alloc(). A constant of the plugin, as the kernel table requires.
      static const FusedOps ops = [] {
        FusedOps o = B::ops();
        static const Composition composition = {
            {o.matmul_add_activation, o.matmul_add_activation_backward}, alloc, release, B::kName};
        o.composition = &composition;
        return o;
      }();
      s->kernels = fused_kernel_table(B::kDeviceType, fp16, ops);
      *state = s.release();
      return DLFUSE_STATUS_OK;
    });
  }

  static void close_plugin(void* state) noexcept {
    try {
      delete static_cast<State*>(state);
    } catch (...) {  // a release that throws must not leave the library
    }
  }

  static dlfuse_status_t get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num, char* err,
                                     size_t err_size) noexcept {
    if (!state)
      return dlfuse::kit::write_error(B::kName, err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                                      "state: expected the plugin's, got NULL");
    return static_cast<const State*>(state)->kernels->get(kernels, num, B::kName, err, err_size);
  }

  static dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      out_pointer(count, "count");
      *count = int32_t(state_of(state).devices.size());
      return DLFUSE_STATUS_OK;
    });
  }

  static dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err,
                               size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      out_pointer(ptr, "ptr");
      *ptr = nullptr;
      *ptr = B::alloc(state_of(state).device(device_id), nbytes);
      return DLFUSE_STATUS_OK;
    });
  }

  static dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      Device& d = state_of(state).device(device_id);
      if (ptr) B::release(d, ptr);
      return DLFUSE_STATUS_OK;
    });
  }

  // A device-side range of a copy: the buffer must be this device's and hold it.
  static void check_range(Device& d, const void* p, size_t offset, size_t nbytes, const char* name) {
    const uint64_t size = B::size_of(d, p);
    if (size == 0)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                  std::string(name) + ": expected a buffer allocated on " + d.label() + ", got another pointer");
    if (offset > size || nbytes > size - offset)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string(name) + ": expected offset + nbytes <= the buffer's " +
                                                      std::to_string(size) + " bytes, got " + std::to_string(offset) +
                                                      " + " + std::to_string(nbytes));
  }

  static dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                              const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                              size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      Device& d = state_of(state).device(device_id);
      const auto q = B::queue(d, stream);
      if (kind < DLFUSE_COPY_HOST_TO_DEVICE || kind > DLFUSE_COPY_DEVICE_TO_DEVICE)
        throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "kind: expected 1..3, got " + std::to_string(int(kind)));
      if (nbytes == 0) return DLFUSE_STATUS_OK;
      if (!dst || !src)
        throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                    std::string(dst ? "src" : "dst") + ": expected a pointer, got NULL");
      if (kind != DLFUSE_COPY_HOST_TO_DEVICE) check_range(d, src, src_offset, nbytes, "src");
      if (kind != DLFUSE_COPY_DEVICE_TO_HOST) check_range(d, dst, dst_offset, nbytes, "dst");
      switch (kind) {
        case DLFUSE_COPY_HOST_TO_DEVICE:  // done on return: the host buffer may go away
          B::write(d, q, dst, dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
          break;
        case DLFUSE_COPY_DEVICE_TO_HOST:
          B::read(d, q, src, src_offset, static_cast<char*>(dst) + dst_offset, nbytes);
          break;
        default: B::copy(d, q, src, src_offset, dst, dst_offset, nbytes); break;
      }
      return DLFUSE_STATUS_OK;
    });
  }

  static dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err,
                                     size_t err_size) noexcept {
    return guarded(err, err_size, [&] {
      Device& d = state_of(state).device(device_id);
      B::finish(d, B::queue(d, stream));
      return DLFUSE_STATUS_OK;
    });
  }

  static inline const dlfuse_plugin_t descriptor = {sizeof(dlfuse_plugin_t),
                                                    DLFUSE_ABI_MAJOR,
                                                    DLFUSE_ABI_MINOR,
                                                    B::kName,
                                                    B::kVersion,
                                                    B::kDeviceType,
                                                    open_plugin,
                                                    close_plugin,
                                                    get_kernels,
                                                    device_count,
                                                    alloc,
                                                    release,
                                                    copy,
                                                    synchronize};
};

}  // namespace dlfuse_plugin

#endif
