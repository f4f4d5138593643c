#include "kernel_table.h"

#include <vector>

namespace dlfuse_plugin {

std::unique_ptr<dlfuse::kit::KernelTable> fused_kernel_table(int32_t device_type, bool fp16, const FusedOps& ops) {
  using Entry = dlfuse::kit::KernelTable::Entry;
  std::vector<DLDataType> dtypes = {{kDLFloat, 32, 1}};
  if (fp16) dtypes.push_back({kDLFloat, 16, 1});
  return std::make_unique<dlfuse::kit::KernelTable>(
      device_type, dtypes, 100,
      std::vector<Entry>{{DLFUSE_OP_MATMUL_ADD_RELU, ops.matmul_add_relu},
                         {DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, ops.matmul_add_relu_backward},
                         {DLFUSE_OP_ADD_MUL_ACTIVATION, ops.add_mul_activation},
                         // Takes the fifth input, out (d_pre read from the forward's output).
                         {DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, ops.add_mul_activation_backward, nullptr,
                          DLFUSE_KERNEL_TAKES_V1_1_INPUTS},
                         {DLFUSE_OP_MATMUL_ADD_ACTIVATION, ops.matmul_add_activation},
                         {DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, ops.matmul_add_activation_backward},
                         {DLFUSE_OP_MATMUL_ADD_RESIDUAL, ops.matmul_add_residual},
                         {DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, ops.matmul_add_residual_backward},
                         {DLFUSE_OP_MLP, mlp_composed, const_cast<Composition*>(ops.composition)},
                         {DLFUSE_OP_MLP_BACKWARD, mlp_backward_composed, const_cast<Composition*>(ops.composition)}});
}

}  // namespace dlfuse_plugin
