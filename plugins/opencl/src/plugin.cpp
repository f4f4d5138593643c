// The OpenCL plugin's descriptor, kernel table and device services.
//
// Memory: alloc() returns a cl_mem of the device's context (what DLTensor.data holds on
// OpenCL); offsets travel separately (copy()'s offsets, DLTensor.byte_offset). Streams
// are cl_command_queues of that context; NULL is the device's default in-order queue.
#include <new>

#include "kernel_table.h"
#include "ops.h"

namespace dlfuse_opencl {
namespace {

dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept;
dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept;

// mlp and mlp_backward: a call of the layer kernels per layer, the backward's scratch from alloc().
const dlfuse_plugin::Composition kComposition = {
    {matmul_add_activation, matmul_add_activation_backward}, alloc, release, "opencl"};

dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void** state, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!state) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "argument 'state' is NULL");
    *state = nullptr;
    auto s = std::make_unique<State>();
    open_devices(s.get());
    // float16 is declared when every device of the plugin reports cl_khr_fp16 (a call on a
    // device without it would have nothing to run); pick devices with DLFUSE_OPENCL_DEVICE.
    bool fp16 = true;
    for (const auto& d : s->devices) fp16 = fp16 && d->fp16;
    s->kernels = dlfuse_plugin::fused_kernel_table(
        kDLOpenCL, fp16,
        {matmul_add_relu, matmul_add_relu_backward, add_mul_activation, add_mul_activation_backward,
         matmul_add_activation, matmul_add_activation_backward, matmul_add_residual, matmul_add_residual_backward,
         &kComposition});
    *state = s.release();
    return DLFUSE_STATUS_OK;
  });
}

void close_plugin(void* state) noexcept { delete static_cast<State*>(state); }

dlfuse_status_t get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num, char* err,
                            size_t err_size) noexcept {
  if (!state)
    return kit::write_error("opencl", err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                            "state: expected the plugin's, got NULL");
  return static_cast<const State*>(state)->kernels->get(kernels, num, "opencl", err, err_size);
}

dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!state || !count) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "NULL state or out-pointer");
    *count = int32_t(static_cast<State*>(state)->devices.size());
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    if (!ptr) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "argument 'ptr' is NULL");
    *ptr = nullptr;
    Device& d = static_cast<State*>(state)->device(device_id);
    // A zero-byte request still gets a valid (1-byte) buffer: OpenCL has no empty cl_mem.
    cl_int rc = CL_SUCCESS;
    cl_mem m = clCreateBuffer(d.ctx, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, nullptr, &rc);
    if (rc != CL_SUCCESS) throw_cl(rc, "clCreateBuffer(" + std::to_string(nbytes) + " bytes) on " + d.label());
    *ptr = m;
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    static_cast<State*>(state)->device(device_id);
    if (!ptr) return DLFUSE_STATUS_OK;
    check_cl(clReleaseMemObject(static_cast<cl_mem>(ptr)), "clReleaseMemObject");
    return DLFUSE_STATUS_OK;
  });
}

cl_command_queue queue_for(Device& d, void* stream) {
  if (!stream) return d.queue;
  cl_command_queue q = static_cast<cl_command_queue>(stream);
  cl_context ctx = nullptr;
  const cl_int rc = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, nullptr);
  if (rc != CL_SUCCESS)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                std::string("stream is not a cl_command_queue (") + cl_error_name(rc) + ")");
  if (ctx != d.ctx)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "stream is a cl_command_queue of another context; expected one of " + d.label() + "'s context");
  return q;
}

dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                     const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                     size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    Device& d = static_cast<State*>(state)->device(device_id);
    cl_command_queue q = queue_for(d, stream);
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string("argument '") + (dst ? "src" : "dst") + "' is NULL");
    switch (kind) {
      case DLFUSE_COPY_HOST_TO_DEVICE:  // blocking: the host buffer may go away on return
        check_cl(clEnqueueWriteBuffer(q, static_cast<cl_mem>(dst), CL_TRUE, dst_offset, nbytes,
                                      static_cast<const char*>(src) + src_offset, 0, nullptr, nullptr),
                 "clEnqueueWriteBuffer");
        break;
      case DLFUSE_COPY_DEVICE_TO_HOST:
        check_cl(clEnqueueReadBuffer(q, static_cast<cl_mem>(const_cast<void*>(src)), CL_TRUE, src_offset, nbytes,
                                     static_cast<char*>(dst) + dst_offset, 0, nullptr, nullptr),
                 "clEnqueueReadBuffer");
        break;
      case DLFUSE_COPY_DEVICE_TO_DEVICE:  // ordered on the queue, not waited for
        check_cl(clEnqueueCopyBuffer(q, static_cast<cl_mem>(const_cast<void*>(src)), static_cast<cl_mem>(dst),
                                     src_offset, dst_offset, nbytes, 0, nullptr, nullptr),
                 "clEnqueueCopyBuffer");
        break;
      default:
        throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                    "argument 'kind' is " + std::to_string(int(kind)) + "; expected 1..3");
    }
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] {
    Device& d = static_cast<State*>(state)->device(device_id);
    check_cl(clFinish(queue_for(d, stream)), "clFinish");
    return DLFUSE_STATUS_OK;
  });
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "opencl",
                                 DLFUSE_OPENCL_VERSION,
                                 kDLOpenCL,
                                 open_plugin,
                                 close_plugin,
                                 get_kernels,
                                 device_count,
                                 alloc,
                                 release,
                                 copy,
                                 synchronize};

}  // namespace
}  // namespace dlfuse_opencl

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &dlfuse_opencl::kPlugin; }
