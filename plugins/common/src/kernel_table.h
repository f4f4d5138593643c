// The kernel table both GPU plugins (OpenCL, WebGPU) register: the same ten fused ops.
#ifndef DLFUSE_PLUGIN_COMMON_KERNEL_TABLE_H_
#define DLFUSE_PLUGIN_COMMON_KERNEL_TABLE_H_

#include <dlfuse/plugin_kit.hpp>

#include <memory>

#include "mlp_composed.h"

namespace dlfuse_plugin {

// One entry point per op, as the plugin's ops.h declares them, and what mlp and
// mlp_backward are composed of (a constant of the plugin).
struct FusedOps {
  dlfuse_kernel_fn_t matmul_add_relu, matmul_add_relu_backward, add_mul_activation, add_mul_activation_backward,
      matmul_add_activation, matmul_add_activation_backward, matmul_add_residual, matmul_add_residual_backward;
  const Composition* composition;
};

// A plugin's FusedOps: M's matmul entry points (matmul_entries.hpp) and the add_mul ones its
// namespace declares (ops.h), its composition to be set by the caller.
#define DLFUSE_PLUGIN_FUSED_OPS(M)                                                                    \
  ::dlfuse_plugin::FusedOps {                                                                         \
    M::matmul_add_relu, M::matmul_add_relu_backward, add_mul_activation, add_mul_activation_backward, \
        M::matmul_add_activation, M::matmul_add_activation_backward, M::matmul_add_residual,          \
        M::matmul_add_residual_backward, nullptr                                                      \
  }

// The table on `device_type`, priority 100: float32, and float16 when `fp16` (declared only
// when every device of the plugin has it: a call on one without would have nothing to run).
std::unique_ptr<dlfuse::kit::KernelTable> fused_kernel_table(int32_t device_type, bool fp16, const FusedOps& ops);

}  // namespace dlfuse_plugin

#endif
