// The kernels of ABI 1.1 and the prologue they share.
#ifndef DLFUSE_CUDA_OPS_H_
#define DLFUSE_CUDA_OPS_H_

#include <memory>

#include "context.h"

namespace dlfuse_cuda {

// Checks what only the plugin knows (one CUDA device for all tensors, a dtype it serves,
// rank), makes the call's device current until destruction and finds its state. Inputs
// whose bit is set in `optional_inputs` may be NULL (the registry has checked the form).
struct CallContext {
  CallContext(void* state, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
              unsigned optional_inputs = 0);
  State* st;
  DeviceState* ds = nullptr;
  DType dt = DType::kF32;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<DeviceGuard> guard;
};

// True when this build's device code runs on `device` (machine code for its architecture,
// or PTX the driver compiles); else *why names the device, its compute capability and the
// architectures built. Leaves `device` current.
bool device_has_kernels(int device, std::string* why);

struct AmFast;
// add_mul_activation's one-pass backward (kernels.h) with its workspace, on the call's stream.
void am_backward(CallContext& cx, const AmFast& p);

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t mlp(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t mlp_backward(void* state, void*, const dlfuse_kernel_args_t* args);

}  // namespace dlfuse_cuda

#endif
