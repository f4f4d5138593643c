// The test plugin's descriptor, kernel table and the argument sanity shared by its kernels.
#include <string>

#include "mlp_layers.hpp"
#include "testref.h"

namespace testref {

dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void**, char*, size_t) noexcept;
void close_plugin(void*) noexcept;
dlfuse_status_t device_count(void*, int32_t*, char*, size_t) noexcept;
dlfuse_status_t alloc(void*, int32_t, size_t, void**, char*, size_t) noexcept;
dlfuse_status_t release(void*, int32_t, void*, char*, size_t) noexcept;
dlfuse_status_t copy(void*, int32_t, dlfuse_copy_kind_t, void*, size_t, const void*, size_t, size_t, void*, char*,
                     size_t) noexcept;
dlfuse_status_t synchronize(void*, int32_t, void*, char*, size_t) noexcept;

namespace {

const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
constexpr int32_t kPriority = -100;  // loses to every real CPU plugin

// mlp and mlp_backward: one call of the layer kernels per layer.
constexpr dlfuse_plugin::LayerKernels kLayers = {matmul_add_activation, matmul_add_activation_backward};

dlfuse_status_t mlp(void* state, void*, const dlfuse_kernel_args_t* args) {
  return dlfuse::kit::guarded(kName, args, [&] {
    dlfuse_plugin::HostScratch scratch;
    return dlfuse_plugin::mlp_forward(state, kLayers, args, scratch);
  });
}

dlfuse_status_t mlp_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return dlfuse::kit::guarded(kName, args, [&] {
    dlfuse_plugin::HostScratch scratch;
    return dlfuse_plugin::mlp_backward(state, kLayers, args, scratch);
  });
}

dlfuse_kernel_t kernel(const char* op, dlfuse_kernel_fn_t fn, uint32_t flags = 0) {
  return dlfuse_kernel_t{
      sizeof(dlfuse_kernel_t), op, kDLCPU, 4, kDtypes, kPriority, fn, nullptr, flags, nullptr, nullptr};
}

const dlfuse_kernel_t kKernels[] = {
    kernel(DLFUSE_OP_MATMUL_ADD_RELU, matmul_add_relu),
    kernel(DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, matmul_add_relu_backward),
    kernel(DLFUSE_OP_ADD_MUL_ACTIVATION, add_mul_activation),
    // Reads add_mul_activation_backward's ABI 1.1 input `out` (5 inputs, NULL where absent).
    kernel(DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, add_mul_activation_backward, DLFUSE_KERNEL_TAKES_V1_1_INPUTS),
    kernel(DLFUSE_OP_MATMUL_ADD_ACTIVATION, matmul_add_activation),
    kernel(DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, matmul_add_activation_backward),
    kernel(DLFUSE_OP_MATMUL_ADD_RESIDUAL, matmul_add_residual),
    kernel(DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, matmul_add_residual_backward),
    kernel(DLFUSE_OP_MLP, mlp),
    kernel(DLFUSE_OP_MLP_BACKWARD, mlp_backward),
#ifdef DLFUSE_TESTREF_EXTRA_OP
    // ops of its own, each with its schema (extra_op.cpp; the testref_ops build)
    dlfuse_kernel_t{sizeof(dlfuse_kernel_t), "testref_scale_add", kDLCPU, 2, kDtypes, kPriority, scale_add, nullptr, 0,
                    &kScaleAddSchema, nullptr},
    dlfuse_kernel_t{sizeof(dlfuse_kernel_t), "testref_scale_add_backward", kDLCPU, 2, kDtypes, kPriority,
                    scale_add_backward, nullptr, 0, &kScaleAddBackwardSchema, nullptr},
    dlfuse_kernel_t{sizeof(dlfuse_kernel_t), "testref_axpby", kDLCPU, 2, kDtypes, kPriority, axpby, nullptr, 0,
                    &kAxpbySchema, nullptr},
    dlfuse_kernel_t{sizeof(dlfuse_kernel_t), "testref_axpby_backward", kDLCPU, 2, kDtypes, kPriority, axpby_backward,
                    nullptr, 0, &kAxpbyBackwardSchema, nullptr},
#endif
};

dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) noexcept {
  if (!kernels || !num) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL out-pointer");
  *kernels = kKernels;
  *num = int32_t(sizeof(kKernels) / sizeof(kKernels[0]));
  return DLFUSE_STATUS_OK;
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 kName,
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

bool same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

}  // namespace

dlfuse_status_t check_call(const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                           bool first_output_required, uint32_t optional_inputs) {
  auto bad = [&](const std::string& m) { return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT, m); };
  if (args->num_inputs != num_inputs || args->num_outputs != num_outputs || !args->inputs || !args->outputs)
    return bad(std::string(args->op ? args->op : "?") + ": wrong number of tensors");
  if (first_output_required && !args->outputs[0]) return bad("output 0 is NULL");
  const DLDataType dt = args->inputs[0] ? args->inputs[0]->dtype : DLDataType{};
  for (int i = 0; i < num_inputs + num_outputs; ++i) {
    const DLTensor* t = i < num_inputs ? args->inputs[i] : args->outputs[i - num_inputs];
    if (!t) {
      if (i < num_inputs && !(optional_inputs >> i & 1u)) return bad("input " + std::to_string(i) + " is NULL");
      continue;
    }
    if (!same_dtype(t->dtype, dt)) return bad("tensors of one call must share a dtype");
    if (t->device.device_type != kDLCPU || t->device.device_id != 0) return bad("tensor not on cpu:0");
  }
  return DLFUSE_STATUS_OK;
}

bool read_activation(const dlfuse_kernel_args_t* args, int* act) {
  const dlfuse_attr_t* a = dlfuse_find_attr(args, DLFUSE_ATTR_ACTIVATION);
  if (!a || a->type != DLFUSE_ATTR_INT64 || a->value.i64 < 0 || a->value.i64 >= DLFUSE_ACT_COUNT) return false;
  *act = int(a->value.i64);
  return true;
}

double read_multiplier(const dlfuse_kernel_args_t* args) { return dlfuse::kit::multiplier(args); }

}  // namespace testref

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &testref::kPlugin; }
