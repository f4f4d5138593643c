// The typed convenience functions: argument packing over the cached built-in handles.
#include <cstring>

#include "attrs.hpp"
#include "error.hpp"
#include "registry.hpp"

using namespace dlfuse;

namespace {

enum Builtin {
  kMatmul = 0, kMatmulBackward = 1, kAddMul = 2, kAddMulBackward = 3,
  kMatmulAct = 4, kMatmulActBackward = 5, kMatmulResidual = 6, kMatmulResidualBackward = 7
};

dlfuse_status_t run(dlfuse_registry_t r, Builtin which, const char* fn, const DLTensor* const* in, int32_t n_in,
                    DLTensor* const* out, int32_t n_out, const dlfuse_attr_t* attrs, int32_t n_attrs, void* stream) {
  return guarded(fn, [&] {
    if (!r) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'registry' is NULL; expected a registry", fn);
    return call_op(r->builtin[which], in, n_in, out, n_out, attrs, n_attrs, stream);
  });
}

// A C caller may pass any int as a dlfuse_activation_t. Loading such a value as the enum
// type is undefined in C++ (UBSan: "load of value ... not a valid value"), so the bits
// are copied out as an integer and the validator refuses values out of range.
int32_t activation_bits(const dlfuse_activation_t& activation) {
  static_assert(sizeof(dlfuse_activation_t) == sizeof(int32_t), "enum of 32 bits");
  int32_t v;
  std::memcpy(&v, &activation, sizeof v);
  return v;
}

}  // namespace

extern "C" {

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_relu(dlfuse_registry_t registry, const DLTensor* a, const DLTensor* b,
                                                     const DLTensor* bias, DLTensor* out, int32_t allow_tf32,
                                                     void* stream) {
  const DLTensor* in[3] = {a, b, bias};
  DLTensor* outs[1] = {out};
  const dlfuse_attr_t attrs[1] = {int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmul, "dlfuse_matmul_add_relu", in, 3, outs, 1, attrs, 1, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_relu_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                              const DLTensor* a, const DLTensor* b, const DLTensor* out,
                                                              DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
                                                              int32_t allow_tf32, void* stream) {
  const DLTensor* in[4] = {grad_out, a, b, out};
  DLTensor* outs[3] = {grad_a, grad_b, grad_bias};
  const dlfuse_attr_t attrs[1] = {int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmulBackward, "dlfuse_matmul_add_relu_backward", in, 4, outs, 3, attrs, 1, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation(dlfuse_registry_t registry, const DLTensor* x, const DLTensor* y,
                                                        const DLTensor* bias, double multiplier,
                                                        dlfuse_activation_t activation, DLTensor* out, void* stream) {
  const DLTensor* in[3] = {x, y, bias};
  DLTensor* outs[1] = {out};
  const dlfuse_attr_t attrs[2] = {int_attr(DLFUSE_ATTR_ACTIVATION, activation_bits(activation)),
                                  float_attr(DLFUSE_ATTR_MULTIPLIER, multiplier)};
  return run(registry, kAddMul, "dlfuse_add_mul_activation", in, 3, outs, 1, attrs, 2, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                 const DLTensor* x, const DLTensor* y,
                                                                 const DLTensor* bias, double multiplier,
                                                                 dlfuse_activation_t activation, DLTensor* grad_x,
                                                                 DLTensor* grad_y, DLTensor* grad_bias, void* stream) {
  const DLTensor* in[4] = {grad_out, x, y, bias};
  DLTensor* outs[3] = {grad_x, grad_y, grad_bias};
  const dlfuse_attr_t attrs[2] = {int_attr(DLFUSE_ATTR_ACTIVATION, activation_bits(activation)),
                                  float_attr(DLFUSE_ATTR_MULTIPLIER, multiplier)};
  return run(registry, kAddMulBackward, "dlfuse_add_mul_activation_backward", in, 4, outs, 3, attrs, 2, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation(dlfuse_registry_t registry, const DLTensor* a,
                                                           const DLTensor* b, const DLTensor* bias,
                                                           dlfuse_activation_t activation, DLTensor* out, DLTensor* pre,
                                                           int32_t allow_tf32, void* stream) {
  const DLTensor* in[3] = {a, b, bias};
  DLTensor* outs[2] = {out, pre};
  const dlfuse_attr_t attrs[2] = {int_attr(DLFUSE_ATTR_ACTIVATION, activation_bits(activation)),
                                  int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmulAct, "dlfuse_matmul_add_activation", in, 3, outs, 2, attrs, 2, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation_backward(
    dlfuse_registry_t registry, const DLTensor* grad_out, const DLTensor* a, const DLTensor* b, const DLTensor* out,
    const DLTensor* pre, dlfuse_activation_t activation, DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
    int32_t allow_tf32, void* stream) {
  const DLTensor* in[5] = {grad_out, a, b, out, pre};
  DLTensor* outs[3] = {grad_a, grad_b, grad_bias};
  const dlfuse_attr_t attrs[2] = {int_attr(DLFUSE_ATTR_ACTIVATION, activation_bits(activation)),
                                  int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmulActBackward, "dlfuse_matmul_add_activation_backward", in, 5, outs, 3, attrs, 2, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual(dlfuse_registry_t registry, const DLTensor* a,
                                                         const DLTensor* b, const DLTensor* bias,
                                                         const DLTensor* residual, DLTensor* out, int32_t allow_tf32,
                                                         void* stream) {
  const DLTensor* in[4] = {a, b, bias, residual};
  DLTensor* outs[1] = {out};
  const dlfuse_attr_t attrs[1] = {int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmulResidual, "dlfuse_matmul_add_residual", in, 4, outs, 1, attrs, 1, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                  const DLTensor* a, const DLTensor* b, DLTensor* grad_a,
                                                                  DLTensor* grad_b, DLTensor* grad_bias,
                                                                  DLTensor* grad_residual, int32_t allow_tf32,
                                                                  void* stream) {
  const DLTensor* in[3] = {grad_out, a, b};
  DLTensor* outs[4] = {grad_a, grad_b, grad_bias, grad_residual};
  const dlfuse_attr_t attrs[1] = {int_attr(DLFUSE_ATTR_ALLOW_TF32, allow_tf32)};
  return run(registry, kMatmulResidualBackward, "dlfuse_matmul_add_residual_backward", in, 3, outs, 4, attrs, 1,
             stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward_from_out(dlfuse_registry_t registry,
                                                                          const DLTensor* grad_out, const DLTensor* out,
                                                                          double multiplier,
                                                                          dlfuse_activation_t activation,
                                                                          DLTensor* grad_x, DLTensor* grad_y,
                                                                          DLTensor* grad_bias, void* stream) {
  const DLTensor* in[5] = {grad_out, nullptr, nullptr, nullptr, out};
  DLTensor* outs[3] = {grad_x, grad_y, grad_bias};
  const dlfuse_attr_t attrs[2] = {int_attr(DLFUSE_ATTR_ACTIVATION, activation_bits(activation)),
                                  float_attr(DLFUSE_ATTR_MULTIPLIER, multiplier)};
  return run(registry, kAddMulBackward, "dlfuse_add_mul_activation_backward_from_out", in, 5, outs, 3, attrs, 2,
             stream);
}

}  // extern "C"
