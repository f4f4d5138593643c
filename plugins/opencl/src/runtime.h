// The plugin's OpenCL runtime: devices in their documented order, one context and one
// default in-order queue per device, the kernel program built once per device and dtype,
// errors as dlfuse statuses with messages.
#ifndef DLFUSE_OPENCL_RUNTIME_H_
#define DLFUSE_OPENCL_RUNTIME_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <dlfuse/plugin_kit.hpp>

#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

namespace dlfuse_opencl {

const char* cl_error_name(cl_int code);

namespace kit = dlfuse::kit;
using kit::Error;
[[noreturn]] void throw_cl(cl_int code, const std::string& what);

// Whether `p` starts with `dispatch`, the first word of an object of the same type from this
// device's ICD (Device::mem_dispatch for a cl_mem, the queue's own for a cl_command_queue). A
// caller's handle goes to OpenCL only after this: the ICD loader reads an object's first word
// as its vendor's dispatch table, so a pointer that is no OpenCL object would crash inside the
// loader instead of failing.
bool same_icd(const void* p, const void* dispatch);
inline const void* dispatch_of(const void* object) { return *static_cast<const void* const*>(object); }

struct Device;
// The queue a call runs on: the device's default for NULL, else `stream` once it is checked
// to be a cl_command_queue of the device's context and device (INVALID_ARGUMENT naming it).
cl_command_queue queue_of(const Device& d, void* stream);
inline void check_cl(cl_int code, const char* what) {
  if (code != CL_SUCCESS) throw_cl(code, what);
}

// Every C entry runs its body through the kit's exception wall: nothing crosses the boundary.
template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return kit::guarded("opencl", err, err_size, std::forward<F>(body));
}

enum class Prec { kF32 = 0, kF16 = 1 };

struct Device {
  int32_t index = 0;  // the device_id
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  cl_context ctx = nullptr;
  cl_command_queue queue = nullptr;    // the default stream
  const void* mem_dispatch = nullptr;  // a cl_mem's first word on this device's ICD (same_icd)
  std::string platform_name, name;
  bool is_cpu = false, fp16 = false;
  // Which GEMM kernel runs: the CPU one on CPUs, the tiled one (128 or 64 tiles, by grid
  // size) elsewhere, unless DLFUSE_OPENCL_GEMM=cpu|tiled|tiled64|tiled128 says otherwise
  // (a testing knob, docs/opencl.md). tile_force: 0 auto, else 64 or 128.
  bool cpu_kernels = false;
  int tile_force = 0;
  int compute_units = 1;

  // The program for a precision, built on first use, once (a failed build stays failed).
  cl_program program(Prec p);
  // A fresh kernel object (cl_kernel is not thread-safe for clSetKernelArg); the caller
  // releases it after enqueueing.
  cl_kernel kernel(Prec p, const char* name);
  std::string label() const;  // "opencl:1 (Portable Computing Language / pthread-...)"

  // The cl_mem handles this plugin allocated on the device and has not released: a handle
  // among them is a cl_mem without asking (same_icd costs a system call).
  void track(cl_mem m);
  void untrack(cl_mem m);
  bool owns(const void* p);
  // Whether p is a cl_mem of this device's ICD: one the plugin owns, or one same_icd accepts.
  bool is_mem(const void* p) { return owns(p) || same_icd(p, mem_dispatch); }

  ~Device();

 private:
  std::mutex mem_mu_;
  std::unordered_set<const void*> mems_;
  std::mutex mu_;
  bool tried_[2] = {false, false};
  cl_program prog_[2] = {nullptr, nullptr};
  std::string build_error_[2];
};

struct State {
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<kit::KernelTable> kernels;
  Device& device(int32_t id);
};

// Enumerates devices (GPUs of every platform, then CPUs; DLFUSE_OPENCL_DEVICE filters and
// reorders) and sets each one up. Throws Error(UNAVAILABLE) when none is usable.
void open_devices(State* s);

// Releases a cl_kernel / cl_mem at scope exit.
struct KernelRef {
  cl_kernel k = nullptr;
  explicit KernelRef(cl_kernel kk) : k(kk) {}
  ~KernelRef() {
    if (k) clReleaseKernel(k);
  }
  KernelRef(const KernelRef&) = delete;
  KernelRef& operator=(const KernelRef&) = delete;
};
struct MemRef {
  cl_mem m = nullptr;
  MemRef() = default;
  explicit MemRef(cl_mem mm) : m(mm) {}
  ~MemRef() {
    if (m) clReleaseMemObject(m);
  }
  MemRef(const MemRef&) = delete;
  MemRef& operator=(const MemRef&) = delete;
};

// A scratch buffer of at least one byte (nbytes may be 0), released by the caller once the
// work that uses it is enqueued (OpenCL keeps it alive until that work finishes).
cl_mem scratch(Device& d, size_t nbytes, const void* init = nullptr);

template <class T>
void set_arg(cl_kernel k, cl_uint i, const T& v) {
  const cl_int rc = clSetKernelArg(k, i, sizeof(T), &v);
  if (rc != CL_SUCCESS) throw_cl(rc, "clSetKernelArg #" + std::to_string(i));
}
inline void set_args_from(cl_kernel, cl_uint) {}
template <class T, class... Rest>
void set_args_from(cl_kernel k, cl_uint i, const T& v, const Rest&... rest) {
  set_arg(k, i, v);
  set_args_from(k, i + 1, rest...);
}
template <class... A>
void set_args(cl_kernel k, const A&... a) {
  set_args_from(k, 0, a...);
}

// Enqueues a 3-D range, rounding the global size up to `local`.
void enqueue(cl_command_queue q, cl_kernel k, const size_t global[3], const size_t local[3], const char* name);
// Work-group size for a pointwise grid whose inner dims are n2 (x) and n1 (y).
void pointwise_local(const Device& d, int64_t n2, int64_t n1, size_t local[3]);

}  // namespace dlfuse_opencl

#endif
