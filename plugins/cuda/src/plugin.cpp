// The CUDA plugin's descriptor, kernel table, open/close and device services.
#include <cstring>
#include <memory>
#include <string>

#include "context.h"
#include "ops.h"

namespace dlfuse_cuda {
namespace {

const kit::KernelTable& kernel_table() {
  static const kit::KernelTable table(
      kDLCUDA, {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}}, 100,
      {{DLFUSE_OP_MATMUL_ADD_RELU, matmul_add_relu},
       {DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, matmul_add_relu_backward},
       {DLFUSE_OP_ADD_MUL_ACTIVATION, add_mul_activation},
       {DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, add_mul_activation_backward, nullptr, DLFUSE_KERNEL_TAKES_V1_1_INPUTS},
       {DLFUSE_OP_MATMUL_ADD_ACTIVATION, matmul_add_activation},
       {DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, matmul_add_activation_backward},
       {DLFUSE_OP_MATMUL_ADD_RESIDUAL, matmul_add_residual},
       {DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, matmul_add_residual_backward},
       {DLFUSE_OP_MLP, mlp},
       {DLFUSE_OP_MLP_BACKWARD, mlp_backward}});
  return table;
}

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!state) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL state pointer");
    *state = nullptr;
    if (host && DLFUSE_HAS_FIELD(host, dlfuse_host_info_t, abi_major) && host->abi_major != DLFUSE_ABI_MAJOR)
      return fail(err, err_size, DLFUSE_STATUS_ABI_MISMATCH,
                  "host ABI major " + std::to_string(host->abi_major) + ", plugin built for " +
                      std::to_string(DLFUSE_ABI_MAJOR));
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
      int drv = 0, rt = 0;
      cudaDriverGetVersion(&drv);
      cudaRuntimeGetVersion(&rt);
      const std::string versions =
          "CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", driver " +
          (drv ? std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10) : std::string("not installed"));
      cudaGetLastError();  // clear the sticky-less error so nothing later trips on it
      return fail(err, err_size, DLFUSE_STATUS_UNAVAILABLE,
                  e != cudaSuccess
                      ? "no usable CUDA device: cudaGetDeviceCount failed: " + cuda_error(e) + "; " + versions
                      : "no CUDA device found (" + versions + ")");
    }
    // Per device: a machine may hold GPUs this build has code for next to one it has not
    // (older than sm_75, or a new architecture without PTX to JIT). The plugin serves the
    // first kind and is unavailable only when no device is usable.
    std::unique_ptr<State> st(new State);
    st->device_count = count;
    std::string none;
    int usable = 0, prev = 0;
    cudaGetDevice(&prev);
    for (int i = 0; i < count; ++i) {
      st->devices.emplace_back(new DeviceState);
      st->devices.back()->id = i;
      if (device_has_kernels(i, &st->devices.back()->no_kernels))
        ++usable;
      else
        none += (none.empty() ? "" : "; ") + st->devices.back()->no_kernels;
    }
    cudaSetDevice(prev);
    if (usable == 0)
      return fail(err, err_size, DLFUSE_STATUS_UNAVAILABLE, "this build's kernels cannot run here: " + none);
    *state = st.release();
    return DLFUSE_STATUS_OK;
  });
}

void close_plugin(void* state) noexcept { destroy_state(static_cast<State*>(state)); }

dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] { return kernel_table().get(kernels, num, "cuda", err, err_size); });
}

State* as_state(void* s) {
  if (!s) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "NULL plugin state (open() did not succeed)");
  return static_cast<State*>(s);
}

void check_device(State* st, int32_t id) {
  if (id < 0 || id >= st->device_count)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "device_id " + std::to_string(id) + " out of range [0, " + std::to_string(st->device_count) + ")");
}

dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!count) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL count");
    *count = as_state(state)->device_count;
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!ptr) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL ptr");
    *ptr = nullptr;
    check_device(as_state(state), device_id);
    DeviceGuard dg(device_id);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, nbytes == 0 ? 1 : nbytes);  // 0 bytes: still a unique pointer
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(err, err_size,
                  e == cudaErrorMemoryAllocation ? DLFUSE_STATUS_OUT_OF_MEMORY : DLFUSE_STATUS_DEVICE_ERROR,
                  "cudaMalloc(" + std::to_string(nbytes) + " bytes) on device " + std::to_string(device_id) + ": " +
                      cuda_error(e));
    }
    *ptr = p;
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    check_device(as_state(state), device_id);
    if (!ptr) return DLFUSE_STATUS_OK;
    DeviceGuard dg(device_id);
    DLF_CUDA(cudaFree(ptr));
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                     const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                     size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    check_device(as_state(state), device_id);
    cudaMemcpyKind k;
    switch (kind) {
      case DLFUSE_COPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
      case DLFUSE_COPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
      case DLFUSE_COPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
      default:
        return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                    "copy kind " + std::to_string(int(kind)) +
                        " is not one of HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE");
    }
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL copy pointer");
    DeviceGuard dg(device_id);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    DLF_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes,
                             k, s));
    // A copy that touches host memory has completed when it returns (plugin.h); only this stream waits.
    if (k != cudaMemcpyDeviceToDevice) DLF_CUDA(cudaStreamSynchronize(s));
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    check_device(as_state(state), device_id);
    DeviceGuard dg(device_id);
    DLF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return DLFUSE_STATUS_OK;
  });
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "cuda",
                                 DLFUSE_CUDA_VERSION,
                                 kDLCUDA,
                                 open_plugin,
                                 close_plugin,
                                 get_kernels,
                                 device_count,
                                 alloc,
                                 release,
                                 copy,
                                 synchronize};

}  // namespace

// Common prologue of a kernel call: state, the device of the call's tensors made current.
CallContext::CallContext(void* state, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                         unsigned optional_inputs)
    : st(as_state(state)) {
  if (!args) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "NULL args");
  if (args->num_inputs != num_inputs || args->num_outputs != num_outputs || !args->inputs || !args->outputs)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                std::string(args->op ? args->op : "?") + ": expected " + std::to_string(num_inputs) + " inputs and " +
                    std::to_string(num_outputs) + " outputs, got " + std::to_string(args->num_inputs) + " and " +
                    std::to_string(args->num_outputs));
  const DLTensor* first = nullptr;
  for (int i = 0; i < num_inputs; ++i) {
    if (!args->inputs[i]) {
      if (optional_inputs & (1u << i)) continue;
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "input " + std::to_string(i) + " is NULL");
    }
    if (!first) first = args->inputs[i];
  }
  for (int i = 0; i < num_inputs + num_outputs; ++i) {
    const DLTensor* t = i < num_inputs ? args->inputs[i] : args->outputs[i - num_inputs];
    if (!t) continue;
    if (t->device.device_type != kDLCUDA || t->device.device_id != first->device.device_id)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "tensor " + std::to_string(i) + " is not on cuda:" + std::to_string(first->device.device_id));
    if (t->ndim > kMaxRank)
      throw Error(DLFUSE_STATUS_UNSUPPORTED, "tensor " + std::to_string(i) + " has " + std::to_string(t->ndim) +
                                                 " dims; at most " + std::to_string(kMaxRank));
  }
  if (!read_dtype(first->dtype, &dt))
    throw Error(DLFUSE_STATUS_UNSUPPORTED, "dtype is not float32, float16 or bfloat16");
  device = first->device.device_id;
  check_device(st, device);
  if (!st->devices[size_t(device)]->no_kernels.empty())
    throw Error(DLFUSE_STATUS_UNSUPPORTED, st->devices[size_t(device)]->no_kernels);
  guard.reset(new DeviceGuard(device));
  ds = &device_state(st, device);
  stream = static_cast<cudaStream_t>(args->stream);
}

}  // namespace dlfuse_cuda

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &dlfuse_cuda::kPlugin; }
