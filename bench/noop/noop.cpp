// The no-op plugin: kernels that look at nothing and return OK, so that timing a call
// through libdlfuse measures the registry's own cost (validation, dispatch, the call
// through the kernel table) and nothing else. Built into <build>/bench/plugins, a folder
// that discovery never searches: only the benchmark loads it, by path.
//
// It offers the four ops of ABI 1 on the CPU for every dtype the registry knows, and one
// op the registry does not know ("noop"), which gets only the generic validation. Its
// device services are real (host memory), so the benchmark driver can run its whole
// timing path over it in the smoke test.
#include <dlfuse/plugin.h>

#include <cstdlib>
#include <cstring>

namespace {

const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
int g_state;
int g_kernel_data;

dlfuse_status_t say(char* err, size_t err_size, dlfuse_status_t st, const char* msg) noexcept {
  if (err && err_size) {
    std::strncpy(err, msg, err_size - 1);
    err[err_size - 1] = '\0';
  }
  return st;
}

dlfuse_status_t nothing(void*, void*, const dlfuse_kernel_args_t*) noexcept { return DLFUSE_STATUS_OK; }

constexpr dlfuse_kernel_t kernel(const char* op) {
  return dlfuse_kernel_t{sizeof(dlfuse_kernel_t), op, kDLCPU,  4,      kDtypes, 1000, nothing,
                         &g_kernel_data,          0,  nullptr, nullptr};
}

const dlfuse_kernel_t kKernels[] = {
    kernel(DLFUSE_OP_MATMUL_ADD_RELU),
    kernel(DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD),
    kernel(DLFUSE_OP_ADD_MUL_ACTIVATION),
    kernel(DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD),
    kernel("noop"),
};

dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) noexcept {
  if (!state) return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "open: state pointer is NULL");
  if (host && DLFUSE_HAS_FIELD(host, dlfuse_host_info_t, abi_major) && host->abi_major != DLFUSE_ABI_MAJOR)
    return say(err, err_size, DLFUSE_STATUS_ABI_MISMATCH, "open: host ABI major differs from the plugin's (1)");
  *state = &g_state;
  return DLFUSE_STATUS_OK;
}

void close_plugin(void*) noexcept {}

dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) noexcept {
  if (!kernels || !num) return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "get_kernels: NULL out-pointer");
  *kernels = kKernels;
  *num = int32_t(sizeof(kKernels) / sizeof(kKernels[0]));
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t device_count(void*, int32_t* count, char* err, size_t err_size) noexcept {
  if (!count) return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "device_count: count is NULL");
  *count = 1;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_device(int32_t id, char* err, size_t err_size) noexcept {
  return id == 0 ? DLFUSE_STATUS_OK
                 : say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "device_id: expected 0 (one cpu device)");
}

dlfuse_status_t alloc(void*, int32_t id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  if (!ptr) return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
  if (check_device(id, err, err_size) != DLFUSE_STATUS_OK) return DLFUSE_STATUS_INVALID_ARGUMENT;
  if (nbytes > (size_t(1) << 62)) return say(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: size too large");
  const size_t rounded = (nbytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) return say(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: out of host memory");
  *ptr = p;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t release(void*, int32_t id, void* ptr, char* err, size_t err_size) noexcept {
  if (check_device(id, err, err_size) != DLFUSE_STATUS_OK) return DLFUSE_STATUS_INVALID_ARGUMENT;
  std::free(ptr);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t copy(void*, int32_t id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset, const void* src,
                     size_t src_offset, size_t nbytes, void*, char* err, size_t err_size) noexcept {
  if (check_device(id, err, err_size) != DLFUSE_STATUS_OK) return DLFUSE_STATUS_INVALID_ARGUMENT;
  if (kind < DLFUSE_COPY_HOST_TO_DEVICE || kind > DLFUSE_COPY_DEVICE_TO_DEVICE)
    return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "copy: kind must be 1, 2 or 3");
  if (nbytes == 0) return DLFUSE_STATUS_OK;
  if (!dst || !src) return say(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "copy: NULL dst or src");
  std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t synchronize(void*, int32_t id, void*, char* err, size_t err_size) noexcept {
  return check_device(id, err, err_size);
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "noop",
                                 "1.0.0",
                                 kDLCPU,
                                 open_plugin,
                                 close_plugin,
                                 get_kernels,
                                 device_count,
                                 alloc,
                                 release,
                                 copy,
                                 synchronize};

}  // namespace

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin; }
