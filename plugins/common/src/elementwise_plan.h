// The host plan of add_mul_activation_backward shared by the OpenCL and WebGPU plugins:
// which gradients the one pointwise pass writes and which are reduced from d_pre, and
// the input views that pass reads.
#ifndef DLFUSE_PLUGIN_COMMON_ELEMENTWISE_PLAN_H_
#define DLFUSE_PLUGIN_COMMON_ELEMENTWISE_PLAN_H_

#include <dlfuse/plugin_kit.hpp>

#include <vector>

#include "layout.h"

namespace dlfuse_plugin {

// add_mul_activation_backward's call as the kernels read it. The kernel declares
// DLFUSE_KERNEL_TAKES_V1_1_INPUTS, so the registry passes five inputs; four (the ABI 1.0
// form, out absent) are taken too, for a caller of the table.
struct AddMulBackward {
  int num_inputs = 0;                  // 5, or 4 for the 1.0 form
  const char* const* names = nullptr;  // its inputs then outputs, for messages
  const DLTensor *g = nullptr, *x = nullptr, *y = nullptr, *b = nullptr, *out = nullptr;
  const DLTensor* src = nullptr;  // what d_pre is computed from: out, or x (with y and bias)
  const DLTensor* grads[3] = {};
  int act = 0;
  float mult = 1;
};
// The call's form, for the plugin's checks of its arity and arguments (prepare_call).
AddMulBackward add_mul_backward_form(const dlfuse_kernel_args_t* args);
// Then its tensors and attributes, and the backward's two forms (docs/ops.md): x, y and
// bias, or out alone, whose derivative exists for identity, relu, sigmoid and tanh only.
// The registry checks the forms first; the kernels would read NULL (or give NaN) otherwise.
void read_add_mul_backward(const dlfuse_kernel_args_t* args, AddMulBackward& f);

// grad_x, grad_y, grad_bias: those of the output's shape are written directly (bit i of
// `direct`), the broadcast ones (reduce[i]) are sums of a d_pre scratch; absent or empty
// gradients are neither.
struct GradRoute {
  int direct = 0;
  bool reduce[3] = {false, false, false};
  bool need_tmp() const { return reduce[0] || reduce[1] || reduce[2]; }
};
GradRoute route_grads(const DLTensor* const grads[3], const Dims& oshape);

// The views of grad_out, x, y and bias over `oshape` (strides, element offsets), in the
// kernels' argument order; y and bias are zero views when NULL (the out form never reads
// them).
void input_views(const DLTensor* g, const DLTensor* x, const DLTensor* y, const DLTensor* b, const Dims& oshape,
                 std::vector<Dims>& strides, std::vector<int64_t>& offs);

}  // namespace dlfuse_plugin

#endif
