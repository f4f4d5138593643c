// The host plan of add_mul_activation_backward shared by the OpenCL and WebGPU plugins:
// which gradients the one pointwise pass writes and which are reduced from d_pre, and
// the input views that pass reads.
#ifndef DLFUSE_PLUGIN_COMMON_ELEMENTWISE_PLAN_H_
#define DLFUSE_PLUGIN_COMMON_ELEMENTWISE_PLAN_H_

#include <vector>

#include "layout.h"

namespace dlfuse_plugin {

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
