// The float64 reference of the kernels (docs/ops.md), over dense row-major values.
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
bool broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out);

double ref_activate(int act, double p);
double ref_activate_grad(int act, double p, double grad);  // grad * act'(p), relu a select
// The sum of the absolute values of the terms of act'(p) as docs/ops.md writes it: the
// scale a gradient's error is measured against, since act'(p) cancels (tanh' = 1 - t^2
// near |t| = 1, GELU' and SiLU' near their zeros) where its value alone says nothing.
double ref_activate_grad_scale(int act, double p);

// From the forward's out = act(pre), for IDENTITY, RELU, SIGMOID, TANH (docs/ops.md,
// "Reading out instead"): grad * act'(p) and the scale A written in out.
double ref_activate_grad_from_out(int act, double out, double grad);
double ref_activate_grad_scale_from_out(int act, double out);

// a @ b + bias; its scale is the sum of |terms| plus |bias|.
RefOut ref_matmul_pre(const Dense& a, const Dense& b, const Dense& bias);
RefOut ref_matmul_forward(const Dense& a, const Dense& b, const Dense& bias);  // relu of it
// out = act(pre) (scale: pre's, docs/ops.md "sums"), then pre.
std::vector<RefOut> ref_matmul_activation(const Dense& a, const Dense& b, const Dense& bias, int act);
RefOut ref_matmul_residual(const Dense& a, const Dense& b, const Dense& bias, const Dense& residual);

struct Grads {
  RefOut first, second, bias;  // grad_a/grad_b or grad_x/grad_y, then grad_bias
  RefOut residual;             // matmul_add_residual_backward's grad_residual
};
Grads ref_matmul_backward(const Dense& grad_out, const Dense& a, const Dense& b, const Dense& out,
                          const std::vector<int64_t>& bias_shape);
// `saved` is the forward's out (from_out) or its pre.
Grads ref_matmul_activation_backward(const Dense& grad_out, const Dense& a, const Dense& b, const Dense& saved,
                                     bool from_out, int act, const std::vector<int64_t>& bias_shape);
Grads ref_matmul_residual_backward(const Dense& grad_out, const Dense& a, const Dense& b,
                                   const std::vector<int64_t>& bias_shape, const std::vector<int64_t>& residual_shape);

RefOut ref_add_mul_forward(const Dense& x, const Dense& y, const Dense& bias, int act, double mult);
Grads ref_add_mul_backward(const Dense& grad_out, const Dense& x, const Dense& y, const Dense& bias, int act,
                           double mult);
// The out form: d_pre from the forward's out; the gradients have the given shapes.
Grads ref_add_mul_backward_from_out(const Dense& grad_out, const Dense& out, const std::vector<int64_t>& x_shape,
                                    const std::vector<int64_t>& y_shape, const std::vector<int64_t>& bias_shape,
                                    int act, double mult);
// The pre-activation x + bias + mult * y at every element of the output.
Dense ref_pre_activation(const Dense& x, const Dense& y, const Dense& bias, double mult);

}  // namespace dlfuse_conformance

#endif
