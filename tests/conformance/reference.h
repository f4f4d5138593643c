// The float64 reference of the four kernels (docs/ops.md), over dense row-major values.
// Each result carries, per element, the scale its tolerance is measured against:
// the sum of |terms| for sums, |value| for pointwise results.
#ifndef DLFUSE_CONFORMANCE_REFERENCE_H_
#define DLFUSE_CONFORMANCE_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace dlfuse_conformance {

struct Dense {
  std::vector<int64_t> shape;
  std::vector<double> v;
};

struct RefOut {
  std::vector<int64_t> shape;
  std::vector<double> val, scale;
};

// NumPy broadcast of two shapes; false if they do not broadcast.
bool broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                      std::vector<int64_t>* out);

double ref_activate(int act, double p);
double ref_activate_grad(int act, double p, double grad);  // grad * act'(p), relu a select
// The sum of the absolute values of the terms of act'(p) as docs/ops.md writes it: the
// scale a gradient's error is measured against, since act'(p) cancels (tanh' = 1 - t^2
// near |t| = 1, GELU' and SiLU' near their zeros) where its value alone says nothing.
double ref_activate_grad_scale(int act, double p);

RefOut ref_matmul_forward(const Dense& a, const Dense& b, const Dense& bias);

struct Grads {
  RefOut first, second, bias;  // grad_a/grad_b or grad_x/grad_y, then grad_bias
};
Grads ref_matmul_backward(const Dense& grad_out, const Dense& a, const Dense& b, const Dense& out,
                          const std::vector<int64_t>& bias_shape);

RefOut ref_add_mul_forward(const Dense& x, const Dense& y, const Dense& bias, int act, double mult);
Grads ref_add_mul_backward(const Dense& grad_out, const Dense& x, const Dense& y, const Dense& bias,
                           int act, double mult);
// The pre-activation x + bias + mult * y at every element of the output.
Dense ref_pre_activation(const Dense& x, const Dense& y, const Dense& bias, double mult);

}  // namespace dlfuse_conformance

#endif
