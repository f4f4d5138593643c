#include "runtime.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "device_select.h"
#include "dlfuse_opencl_kernels.h"  // generated: kKernelSource, every kernels/*.cl in order

namespace dlfuse_opencl {

const char* cl_error_name(cl_int code) {
  switch (code) {
    // clang-format off
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_BUILD_PROGRAM_FAILURE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_COMPILE_PROGRAM_FAILURE)
    E(CL_LINK_PROGRAM_FAILURE) E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM)
    E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT) E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE)
    E(CL_INVALID_HOST_PTR) E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE)
    E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT)
    E(CL_INVALID_OPERATION) E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
#undef E
        // clang-format on
        case -1001 : return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
  }
}

void throw_cl(cl_int code, const std::string& what) {
  const bool oom = code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_HOST_MEMORY ||
                   code == CL_OUT_OF_RESOURCES || code == CL_INVALID_BUFFER_SIZE;
  throw Error(oom ? DLFUSE_STATUS_OUT_OF_MEMORY : DLFUSE_STATUS_DEVICE_ERROR,
              what + " failed: " + cl_error_name(code) + " (" + std::to_string(code) + ")");
}

namespace {

std::string platform_str(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "?";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, &s[0], nullptr);
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::string device_str(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, &s[0], nullptr);
  s.resize(std::strlen(s.c_str()));
  return s;
}

// DLFUSE_OPENCL_BUILD_OPTIONS: appended to clBuildProgram's options (tuning, e.g.
// -DGEMM_BK=16; docs/opencl.md).
std::string extra_build_options() {
  const char* e = std::getenv("DLFUSE_OPENCL_BUILD_OPTIONS");
  return e && *e ? std::string(" ") + e : std::string();
}

// DLFUSE_OPENCL_DUMP_BINARY=<path prefix>: writes each built program's binary (PTX on
// NVIDIA) to <prefix>.<index>.<f32|f16>.bin, for inspecting what the driver compiled.
void dump_binary(cl_program prog, const std::string& opts) {
  const char* prefix = std::getenv("DLFUSE_OPENCL_DUMP_BINARY");
  if (!prefix || !*prefix) return;
  size_t size = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) return;
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS) return;
  static std::atomic<int> counter{0};
  const std::string path = std::string(prefix) + "." + std::to_string(counter++) +
                           (opts.find("DLF_HALF=1") != std::string::npos ? ".f16" : ".f32") + ".bin";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(bin.data(), 1, bin.size(), f);
    std::fclose(f);
  }
}

struct Candidate {
  cl_platform_id platform;
  cl_device_id device;
  std::string platform_name, name;
  bool is_cpu;
};

// GPUs of every platform (platform order, then device order), then CPUs likewise.
std::vector<Candidate> enumerate() {
  cl_uint np = 0;
  cl_int rc = clGetPlatformIDs(0, nullptr, &np);
  if (rc == -1001 || np == 0)
    throw Error(DLFUSE_STATUS_UNAVAILABLE, "no OpenCL platform: the ICD loader lists none (check /etc/OpenCL/vendors)");
  check_cl(rc, "clGetPlatformIDs");
  std::vector<cl_platform_id> plats(np);
  check_cl(clGetPlatformIDs(np, plats.data(), nullptr), "clGetPlatformIDs");
  std::vector<Candidate> out;
  for (cl_device_type type : {cl_device_type(CL_DEVICE_TYPE_GPU), cl_device_type(CL_DEVICE_TYPE_CPU)}) {
    for (cl_platform_id p : plats) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(p, type, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
      std::vector<cl_device_id> devs(nd);
      if (clGetDeviceIDs(p, type, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
      for (cl_device_id d : devs) {
        cl_bool avail = CL_FALSE;
        clGetDeviceInfo(d, CL_DEVICE_AVAILABLE, sizeof avail, &avail, nullptr);
        if (!avail) continue;
        out.push_back(
            {p, d, platform_str(p, CL_PLATFORM_NAME), device_str(d, CL_DEVICE_NAME), type == CL_DEVICE_TYPE_CPU});
      }
    }
  }
  return out;
}

std::string describe(const std::vector<Candidate>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i)
    s += (i ? ", " : "") + std::to_string(i) + " = " + c[i].platform_name + " / " + c[i].name;
  return s.empty() ? "none" : s;
}

}  // namespace

void open_devices(State* s) {
  std::vector<Candidate> c = enumerate();
  if (c.empty()) throw Error(DLFUSE_STATUS_UNAVAILABLE, "no OpenCL GPU or CPU device on any platform");
  // DLFUSE_OPENCL_DEVICE picks and orders the devices (plugins/common/src/device_select.h).
  if (const char* env = std::getenv("DLFUSE_OPENCL_DEVICE"); env && *env)
    c = dlfuse_plugin::select(c, env, "DLFUSE_OPENCL_DEVICE", "device", describe(c),
                              [](const Candidate& d) { return d.platform_name + " / " + d.name; });
  for (const Candidate& cand : c) {
    auto d = std::make_unique<Device>();
    d->index = int32_t(s->devices.size());
    d->platform = cand.platform;
    d->id = cand.device;
    d->platform_name = cand.platform_name;
    d->name = cand.name;
    d->is_cpu = cand.is_cpu;
    d->cpu_kernels = cand.is_cpu;
    if (const char* g = std::getenv("DLFUSE_OPENCL_GEMM"); g && *g) {
      const std::string v(g);
      if (v == "tiled" || v == "tiled64" || v == "tiled128") {
        d->cpu_kernels = false;
        d->tile_force = v == "tiled64" ? 64 : v == "tiled128" ? 128 : 0;
      } else if (v == "cpu") {
        d->cpu_kernels = true;
      } else {
        throw Error(DLFUSE_STATUS_UNAVAILABLE,
                    "DLFUSE_OPENCL_GEMM='" + v + "'; expected cpu, tiled, tiled64 or tiled128");
      }
    }
    cl_uint cu = 1;
    clGetDeviceInfo(cand.device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, nullptr);
    d->compute_units = int(cu);
    d->fp16 = (" " + device_str(cand.device, CL_DEVICE_EXTENSIONS) + " ").find(" cl_khr_fp16 ") != std::string::npos;
    // Testing knob: the kernels touch half data only through vload_half/vstore_half (core
    // OpenCL C), so the float16 path can be exercised on a device without cl_khr_fp16.
    if (const char* f = std::getenv("DLFUSE_OPENCL_FP16"); f && std::string(f) == "force") d->fp16 = true;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, cl_context_properties(cand.platform), 0};
    cl_int rc = CL_SUCCESS;
    d->ctx = clCreateContext(props, 1, &cand.device, nullptr, nullptr, &rc);
    if (rc != CL_SUCCESS) throw_cl(rc, "clCreateContext for " + d->label());
    d->queue = clCreateCommandQueue(d->ctx, cand.device, 0, &rc);
    if (rc != CL_SUCCESS) throw_cl(rc, "clCreateCommandQueue for " + d->label());
    cl_mem probe = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, 1, nullptr, &rc);
    if (rc != CL_SUCCESS) throw_cl(rc, "clCreateBuffer(1 byte) on " + d->label());
    d->mem_dispatch = dispatch_of(probe);  // every cl_mem of the ICD starts with it
    clReleaseMemObject(probe);
    s->devices.push_back(std::move(d));
  }
  // DLFUSE_OPENCL_VERBOSE=1: say which device got which device_id.
  if (const char* v = std::getenv("DLFUSE_OPENCL_VERBOSE"); v && *v && std::string(v) != "0")
    for (const auto& d : s->devices)
      std::fprintf(stderr, "dlfuse opencl: %s%s%s\n", d->label().c_str(), d->is_cpu ? " [cpu]" : " [gpu]",
                   d->fp16 ? " [cl_khr_fp16]" : "");
}

bool same_icd(const void* p, const void* dispatch) {
  if (!p) return false;
  // Read with process_vm_readv, which fails (EFAULT) on unmapped memory instead of faulting.
  // Where the call itself is refused (a seccomp policy), the handle is trusted as before.
  void* word = nullptr;
  iovec local{&word, sizeof word}, remote{const_cast<void*>(p), sizeof word};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != ssize_t(sizeof word)) return errno != EFAULT;
  return word == dispatch;
}

cl_command_queue queue_of(const Device& d, void* stream) {
  if (!stream) return d.queue;
  cl_command_queue q = static_cast<cl_command_queue>(stream);
  const auto refuse = [&](const std::string& got) {
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "stream: expected NULL or a cl_command_queue of " + d.label() + " (docs/opencl.md), got " + got);
  };
  if (!same_icd(q, dispatch_of(d.queue))) refuse("a pointer that is no OpenCL object");
  cl_context ctx = nullptr;
  cl_device_id dev = nullptr;
  cl_int rc = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, nullptr);
  if (rc == CL_SUCCESS) rc = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, nullptr);
  if (rc != CL_SUCCESS) refuse(std::string("an object that is no cl_command_queue (") + cl_error_name(rc) + ")");
  if (ctx != d.ctx || dev != d.id) refuse("a queue of another context or device");
  return q;
}

Device& State::device(int32_t id) {
  if (id < 0 || id >= int32_t(devices.size()))
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "device_id: expected 0.." + std::to_string(int(devices.size()) - 1) + ", got " + std::to_string(id));
  return *devices[size_t(id)];
}

std::string Device::label() const {
  return "opencl:" + std::to_string(index) + " (" + platform_name + " / " + name + ")";
}

void Device::track(cl_mem m) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  mems_.insert(m);
}

void Device::untrack(cl_mem m) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  mems_.erase(m);
}

bool Device::owns(const void* p) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  return mems_.count(p) != 0;
}

Device::~Device() {
  for (cl_program p : prog_)
    if (p) clReleaseProgram(p);
  if (queue) clReleaseCommandQueue(queue);
  if (ctx) clReleaseContext(ctx);
}

cl_program Device::program(Prec p) {
  const int i = int(p);
  std::lock_guard<std::mutex> lock(mu_);
  if (!tried_[i]) {
    tried_[i] = true;
    if (p == Prec::kF16 && !fp16) {
      build_error_[i] = label() + " does not report cl_khr_fp16: float16 is not supported there";
    } else {
      const char* src = kKernelSource;
      cl_int rc = CL_SUCCESS;
      cl_program prog = clCreateProgramWithSource(ctx, 1, &src, nullptr, &rc);
      if (rc != CL_SUCCESS) {
        build_error_[i] = std::string("clCreateProgramWithSource on ") + label() + ": " + cl_error_name(rc);
      } else {
        const std::string opts = std::string("-DDLF_HALF=") + (p == Prec::kF16 ? "1" : "0") +
                                 " -DDLF_CPU=" + (cpu_kernels ? "1" : "0") + extra_build_options();
        rc = clBuildProgram(prog, 1, &id, opts.c_str(), nullptr, nullptr);
        if (rc != CL_SUCCESS) {
          size_t n = 0;
          clGetProgramBuildInfo(prog, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
          std::string log(n, '\0');
          if (n) clGetProgramBuildInfo(prog, id, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
          log.resize(std::strlen(log.c_str()));
          if (log.size() > 1500) log = log.substr(0, 1500) + " ...";
          build_error_[i] = std::string("clBuildProgram (") + opts + ") on " + label() +
                            " failed: " + cl_error_name(rc) + "; build log: " + (log.empty() ? "(empty)" : log);
          clReleaseProgram(prog);
        } else {
          prog_[i] = prog;
          dump_binary(prog, opts);
          if (const char* v = std::getenv("DLFUSE_OPENCL_VERBOSE"); v && *v && std::string(v) != "0") {
            size_t n = 0;
            clGetProgramBuildInfo(prog, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
            std::string log(n, '\0');
            if (n) clGetProgramBuildInfo(prog, id, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
            std::fprintf(stderr, "dlfuse opencl: built (%s) on %s; log: %s\n", opts.c_str(), label().c_str(),
                         log.c_str());
          }
        }
      }
    }
  }
  if (!prog_[i])
    throw Error(p == Prec::kF16 && !fp16 ? DLFUSE_STATUS_UNSUPPORTED : DLFUSE_STATUS_DEVICE_ERROR, build_error_[i]);
  return prog_[i];
}

cl_kernel Device::kernel(Prec p, const char* kname) {
  cl_program prog = program(p);
  cl_int rc = CL_SUCCESS;
  cl_kernel k = clCreateKernel(prog, kname, &rc);
  if (rc != CL_SUCCESS) throw_cl(rc, std::string("clCreateKernel(") + kname + ") on " + label());
  return k;
}

cl_mem scratch(Device& d, size_t nbytes, const void* init) {
  cl_int rc = CL_SUCCESS;
  const cl_mem_flags flags = CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0);
  cl_mem m = clCreateBuffer(d.ctx, flags, nbytes ? nbytes : 1, const_cast<void*>(init), &rc);
  if (rc != CL_SUCCESS) throw_cl(rc, "clCreateBuffer(" + std::to_string(nbytes) + " bytes scratch) on " + d.label());
  return m;
}

void enqueue(cl_command_queue q, cl_kernel k, const size_t global[3], const size_t local[3], const char* name) {
  size_t g[3];
  for (int i = 0; i < 3; ++i) {
    if (global[i] == 0) return;
    g[i] = (global[i] + local[i] - 1) / local[i] * local[i];
  }
  const cl_int rc = clEnqueueNDRangeKernel(q, k, 3, nullptr, g, local, 0, nullptr, nullptr);
  if (rc != CL_SUCCESS)
    throw_cl(rc, std::string("clEnqueueNDRangeKernel(") + name + ", global " + std::to_string(g[0]) + "x" +
                     std::to_string(g[1]) + "x" + std::to_string(g[2]) + ", local " + std::to_string(local[0]) + "x" +
                     std::to_string(local[1]) + "x" + std::to_string(local[2]) + ")");
}

namespace {
size_t pow2_at_least(int64_t n, size_t cap) {
  size_t p = 1;
  while (p < cap && int64_t(p) < n) p <<= 1;
  return p;
}
}  // namespace

void pointwise_local(const Device& d, int64_t n2, int64_t n1, size_t local[3]) {
  const size_t cap = d.is_cpu ? 128 : 256;
  local[0] = pow2_at_least(n2, cap);
  local[1] = d.is_cpu ? 1 : pow2_at_least(n1, cap / local[0]);
  local[2] = 1;
}

}  // namespace dlfuse_opencl
