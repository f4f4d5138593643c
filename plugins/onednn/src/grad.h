// The pointwise halves of the backward kernels, shared by matmul_add_relu_backward,
// matmul_add_activation_backward, matmul_add_residual_backward and add_mul_activation_backward's
// out form: dZ = grad_out * act'(pre or out) in one pass, and the reductions of dZ to the
// gradients' shapes (fused column sums, a copy, or a oneDNN reduction). Also the forward's
// pre -> out activation pass.
#ifndef DLFUSE_ONEDNN_GRAD_H_
#define DLFUSE_ONEDNN_GRAD_H_

#include <vector>

#include "common.h"

namespace dlfuse_onednn {

// What dZ = grad_out * act'(src) reads: src is the forward's pre-activation, or (from_out)
// its output, for IDENTITY, RELU, SIGMOID and TANH (docs/ops.md's formulas in out). RELU
// is a select either way; IDENTITY reads no src.
struct DzRule {
  int act = DLFUSE_ACT_IDENTITY;
  bool from_out = false;
};

// A gradient that is reduce_to(scale * dZ, t's shape): dZ summed over the dims where t
// (aligned to dZ's rank) is 1.
struct Reduction {
  const View* t = nullptr;
  double scale = 1.0;
};

// Computes dZ (grad_out's shape, rank >= 1; src of the same shape, or NULL for IDENTITY)
// and writes every reduction. Returns dZ, compact: in `buf`, or `g` itself when dZ = g
// and g is compact (nothing copied).
View dz_and_reductions(State& st, const View& g, const View* src, DzRule rule, const std::vector<Reduction>& reductions,
                       Buffer& buf);

// dst = act(src), same shape, any strides (src and dst may be the same view).
void activation_pass(const View& src, const View& dst, int act);

}  // namespace dlfuse_onednn

#endif
