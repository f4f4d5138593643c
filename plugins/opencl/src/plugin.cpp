// The OpenCL plugin's descriptor and device services (plugins/common/src/device_plugin.hpp):
// what is OpenCL's own below. alloc() returns a cl_mem of the device's context (what
// DLTensor.data holds on kDLOpenCL). Streams are cl_command_queues of that context; NULL is
// the device's default in-order queue.
#include "device_plugin.hpp"
#include "ops.h"

namespace dlfuse_opencl {
namespace {

struct Backend {
  static constexpr const char* kName = "opencl";
  static constexpr const char* kVersion = DLFUSE_OPENCL_VERSION;
  static constexpr int32_t kDeviceType = kDLOpenCL;
  using State = dlfuse_opencl::State;
  using Device = dlfuse_opencl::Device;

  static dlfuse_plugin::FusedOps ops() { return fused_ops(); }
  // A zero-byte request still gets a valid (1-byte) buffer: OpenCL has no empty cl_mem.
  static void* alloc(Device& d, size_t nbytes) {
    cl_int rc = CL_SUCCESS;
    cl_mem m = clCreateBuffer(d.ctx, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, nullptr, &rc);
    if (rc != CL_SUCCESS) throw_cl(rc, "clCreateBuffer(" + std::to_string(nbytes) + " bytes) on " + d.label());
    d.track(m);
    return m;
  }
  static void release(Device& d, void* p) {
    d.untrack(mem(p));
    check_cl(clReleaseMemObject(mem(p)), "clReleaseMemObject");
  }
  static cl_command_queue queue(Device& d, void* stream) { return queue_of(d, stream); }
  // A cl_mem of another context, or a handle that is no cl_mem, has no size here.
  static uint64_t size_of(Device& d, const void* p) {
    if (!d.is_mem(p)) return 0;
    cl_context ctx = nullptr;
    if (clGetMemObjectInfo(mem(p), CL_MEM_CONTEXT, sizeof ctx, &ctx, nullptr) != CL_SUCCESS || ctx != d.ctx) return 0;
    size_t size = 0;
    check_cl(clGetMemObjectInfo(mem(p), CL_MEM_SIZE, sizeof size, &size, nullptr), "clGetMemObjectInfo(CL_MEM_SIZE)");
    return size;
  }
  static void write(Device&, cl_command_queue q, void* dst, size_t off, const void* host, size_t n) {
    check_cl(clEnqueueWriteBuffer(q, mem(dst), CL_TRUE, off, n, host, 0, nullptr, nullptr), "clEnqueueWriteBuffer");
  }
  static void read(Device&, cl_command_queue q, const void* src, size_t off, void* host, size_t n) {
    check_cl(clEnqueueReadBuffer(q, mem(src), CL_TRUE, off, n, host, 0, nullptr, nullptr), "clEnqueueReadBuffer");
  }
  static void copy(Device&, cl_command_queue q, const void* src, size_t src_off, void* dst, size_t dst_off, size_t n) {
    check_cl(clEnqueueCopyBuffer(q, mem(src), mem(dst), src_off, dst_off, n, 0, nullptr, nullptr),
             "clEnqueueCopyBuffer");
  }
  static void finish(Device&, cl_command_queue q) { check_cl(clFinish(q), "clFinish"); }

  static cl_mem mem(const void* p) { return static_cast<cl_mem>(const_cast<void*>(p)); }
};

}  // namespace
}  // namespace dlfuse_opencl

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) {
  return &dlfuse_plugin::DevicePlugin<dlfuse_opencl::Backend>::descriptor;
}
