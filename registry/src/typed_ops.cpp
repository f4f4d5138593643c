// The typed convenience functions: argument packing over the cached built-in handles.
#include <cstring>

#include "attrs.hpp"
#include "core_ops.hpp"
#include "error.hpp"
#include "registry.hpp"

using namespace dlfuse;

namespace {

// One attribute value of a typed function, converted to the type the op's schema gives.
struct AttrValue {
  bool is_float;
  int64_t i;
  double f;
  AttrValue(int32_t v) : is_float(false), i(v), f(0) {}
  AttrValue(double v) : is_float(true), i(0), f(v) {}
};

// A typed function's call of core op `Op`: its arguments in the schema's order (the counts
// checked against dlfuse/ops.def at compile time), attributes keyed and typed by the schema.
template <int32_t Op, size_t NI, size_t NO, size_t NA>
dlfuse_status_t run(dlfuse_registry_t r, const char* fn, const DLTensor* const (&in)[NI], DLTensor* const (&out)[NO],
                    const AttrValue (&values)[NA], void* stream) {
  static_assert(NI == size_t(core_counts::kInputs[Op]) || NI == size_t(core_counts::kBaseInputs[Op]),
                "the op's inputs (or those of the minor that added it)");
  static_assert(NO == size_t(core_counts::kOutputs[Op]), "every output of the op");
  static_assert(NA == size_t(core_counts::kAttrs[Op]), "every attribute of the op, in schema order");
  return guarded(fn, [&] {
    if (!r) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'registry' is NULL; expected a registry", fn);
    const dlfuse_op_schema_t& schema = op_schema(core_op(Op));
    dlfuse_attr_t attrs[NA];
    for (size_t k = 0; k < NA; ++k) {
      const dlfuse_attr_t& d = schema.attrs[k].default_value;
      attrs[k] = d.type == DLFUSE_ATTR_FLOAT64
                     ? float_attr(d.key, values[k].is_float ? values[k].f : double(values[k].i))
                     : int_attr(d.key, values[k].is_float ? int64_t(values[k].f) : values[k].i);
    }
    return call_op(r->builtin[Op], in, int32_t(NI), out, int32_t(NO), attrs, int32_t(NA), stream);
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
  return run<DLFUSE_OP_INDEX(matmul_add_relu)>(registry, "dlfuse_matmul_add_relu", {a, b, bias}, {out}, {allow_tf32},
                                               stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_relu_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                              const DLTensor* a, const DLTensor* b, const DLTensor* out,
                                                              DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
                                                              int32_t allow_tf32, void* stream) {
  return run<DLFUSE_OP_INDEX(matmul_add_relu_backward)>(registry, "dlfuse_matmul_add_relu_backward",
                                                        {grad_out, a, b, out}, {grad_a, grad_b, grad_bias},
                                                        {allow_tf32}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation(dlfuse_registry_t registry, const DLTensor* x,
                                                        const DLTensor* y, const DLTensor* bias, double multiplier,
                                                        dlfuse_activation_t activation, DLTensor* out, void* stream) {
  return run<DLFUSE_OP_INDEX(add_mul_activation)>(registry, "dlfuse_add_mul_activation", {x, y, bias}, {out},
                                                  {activation_bits(activation), multiplier}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                 const DLTensor* x, const DLTensor* y,
                                                                 const DLTensor* bias, double multiplier,
                                                                 dlfuse_activation_t activation, DLTensor* grad_x,
                                                                 DLTensor* grad_y, DLTensor* grad_bias, void* stream) {
  return run<DLFUSE_OP_INDEX(add_mul_activation_backward)>(registry, "dlfuse_add_mul_activation_backward",
                                                           {grad_out, x, y, bias}, {grad_x, grad_y, grad_bias},
                                                           {activation_bits(activation), multiplier}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation(dlfuse_registry_t registry, const DLTensor* a,
                                                           const DLTensor* b, const DLTensor* bias,
                                                           dlfuse_activation_t activation, DLTensor* out, DLTensor* pre,
                                                           int32_t allow_tf32, void* stream) {
  return run<DLFUSE_OP_INDEX(matmul_add_activation)>(registry, "dlfuse_matmul_add_activation", {a, b, bias}, {out, pre},
                                                     {activation_bits(activation), allow_tf32}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation_backward(
    dlfuse_registry_t registry, const DLTensor* grad_out, const DLTensor* a, const DLTensor* b, const DLTensor* out,
    const DLTensor* pre, dlfuse_activation_t activation, DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
    int32_t allow_tf32, void* stream) {
  return run<DLFUSE_OP_INDEX(matmul_add_activation_backward)>(registry, "dlfuse_matmul_add_activation_backward",
                                                              {grad_out, a, b, out, pre}, {grad_a, grad_b, grad_bias},
                                                              {activation_bits(activation), allow_tf32}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual(dlfuse_registry_t registry, const DLTensor* a,
                                                         const DLTensor* b, const DLTensor* bias,
                                                         const DLTensor* residual, DLTensor* out, int32_t allow_tf32,
                                                         void* stream) {
  return run<DLFUSE_OP_INDEX(matmul_add_residual)>(registry, "dlfuse_matmul_add_residual", {a, b, bias, residual},
                                                   {out}, {allow_tf32}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                  const DLTensor* a, const DLTensor* b,
                                                                  DLTensor* grad_a, DLTensor* grad_b,
                                                                  DLTensor* grad_bias, DLTensor* grad_residual,
                                                                  int32_t allow_tf32, void* stream) {
  return run<DLFUSE_OP_INDEX(matmul_add_residual_backward)>(
      registry, "dlfuse_matmul_add_residual_backward", {grad_out, a, b}, {grad_a, grad_b, grad_bias, grad_residual},
      {allow_tf32}, stream);
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward_from_out(
    dlfuse_registry_t registry, const DLTensor* grad_out, const DLTensor* out, double multiplier,
    dlfuse_activation_t activation, DLTensor* grad_x, DLTensor* grad_y, DLTensor* grad_bias, void* stream) {
  return run<DLFUSE_OP_INDEX(add_mul_activation_backward)>(
      registry, "dlfuse_add_mul_activation_backward_from_out", {grad_out, nullptr, nullptr, nullptr, out},
      {grad_x, grad_y, grad_bias}, {activation_bits(activation), multiplier}, stream);
}

}  // extern "C"
