// The core ops' own rules: the shapes their outputs must have, and which optional inputs go
// with which attributes (docs/ops.md); and the core table of specs, one per entry of
// dlfuse/ops.def.
#include <cstring>

#include "activations.hpp"
#include "core_ops.hpp"
#include "error.hpp"
#include "format.hpp"
#include "mlp_rules.hpp"
#include "op_spec.hpp"
#include "shape_checks.hpp"

namespace dlfuse {
namespace {

dlfuse_status_t check_matmul_add_relu(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]");
}

dlfuse_status_t check_matmul_add_relu_backward(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[1], in[2], shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "the forward's out shape")) return s;
  if (auto s = expect_shape(op, "out", in[3], shape, n, "batch(a, b) + [M, N]")) return s;
  if (out[0].t) {
    if (auto s = expect_shape(op, "grad_a", out[0], in[1].t->shape, in[1].t->ndim, "a's shape")) return s;
  }
  if (out[1].t) {
    if (auto s = expect_shape(op, "grad_b", out[1], in[2].t->shape, in[2].t->ndim, "b's shape")) return s;
  }
  if (out[2].t) {
    if (auto s = expect_broadcastable(op, "grad_bias", out[2], shape, n)) return s;
  }
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t pointwise_shape(const char* op, const TensorView* xyb, int64_t* shape, int32_t* n) {
  int64_t xy[kMaxNdim];
  int32_t nxy;
  const DLTensor* x = xyb[0].t;
  const DLTensor* y = xyb[1].t;
  const DLTensor* b = xyb[2].t;
  if (!broadcast_shapes(x->shape, x->ndim, y->shape, y->ndim, xy, &nxy))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: arguments 'x' %s and 'y' %s do not broadcast (NumPy rules)", op,
                shape_of(xyb[0]).c_str(), shape_of(xyb[1]).c_str());
  if (!broadcast_shapes(xy, nxy, b->shape, b->ndim, shape, n))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'bias' %s does not broadcast with x and y's shape %s (NumPy rules)", op,
                shape_of(xyb[2]).c_str(), shape_string(xy, nxy).c_str());
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_add_mul_activation(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = pointwise_shape(op, in, shape, &n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "broadcast(x, y, bias)");
}

dlfuse_status_t check_add_mul_activation_backward(const char* op, const TensorView* in, const TensorView* out) {
  const char* names[3] = {"grad_x", "grad_y", "grad_bias"};
  const char* inputs[3] = {"x", "y", "bias"};
  int64_t shape[kMaxNdim];
  int32_t n;
  if (in[4].t) {  // ABI 1.1: d_pre from out; the outputs' shapes name x's, y's and bias's
    for (int i = 0; i < 3; ++i)
      if (auto s = expect_absent(op, inputs[i], in[1 + i], "pass either x, y and bias, or out")) return s;
    n = in[4].t->ndim;
    for (int32_t d = 0; d < n; ++d) shape[d] = in[4].t->shape[d];
    if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "out's shape")) return s;
    return expect_reductions(op, out, names, 3, shape, n);
  }
  for (int i = 0; i < 3; ++i)
    if (auto s = expect_present(op, inputs[i], in[1 + i], "the forward's input, or pass out instead")) return s;
  if (auto s = pointwise_shape(op, in + 1, shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "broadcast(x, y, bias)")) return s;
  const char* whose[3] = {"x's shape", "y's shape", "bias's shape"};
  for (int i = 0; i < 3; ++i) {
    if (!out[i].t) continue;
    if (auto s = expect_shape(op, names[i], out[i], in[1 + i].t->shape, in[1 + i].t->ndim, whose[i])) return s;
  }
  return DLFUSE_STATUS_OK;
}

// matmul_add_activation: out, and pre when given, have out's shape.
dlfuse_status_t check_matmul_add_activation(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  if (auto s = expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]")) return s;
  if (present(out[1])) return expect_shape(op, "pre", out[1], shape, n, "out's shape");
  return DLFUSE_STATUS_OK;
}

// matmul_add_activation_backward: grad_out, a, b, out, pre (exactly one of out and pre).
dlfuse_status_t check_matmul_add_activation_backward(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[1], in[2], shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "the forward's out shape")) return s;
  if (!present(in[3]) && !present(in[4]))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: arguments 'out' and 'pre' are both NULL; expected exactly one of them", op);
  if (present(in[3]) && present(in[4]))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: arguments 'out' and 'pre' are both given; expected exactly one of them", op);
  const int which = present(in[3]) ? 3 : 4;
  if (auto s = expect_shape(op, which == 3 ? "out" : "pre", in[which], shape, n, "batch(a, b) + [M, N]")) return s;
  if (present(out[0]))
    if (auto s = expect_shape(op, "grad_a", out[0], in[1].t->shape, in[1].t->ndim, "a's shape")) return s;
  if (present(out[1]))
    if (auto s = expect_shape(op, "grad_b", out[1], in[2].t->shape, in[2].t->ndim, "b's shape")) return s;
  const char* names[1] = {"grad_bias"};
  return expect_reductions(op, out + 2, names, 1, shape, n);
}

dlfuse_status_t out_form_needs_invertible(const char* op, int64_t act, const char* instead) {
  if (derivative_from_out(act)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
              "%s: argument 'out' is given with ACTIVATION %s; expected IDENTITY, RELU, SIGMOID or TANH with 'out' "
              "(the derivative of %s is not a function of its output: pass %s)",
              op, activation_name(act), activation_name(act), instead);
}

dlfuse_status_t form_matmul_add_activation_backward(const OpSpec&, const char* op, const TensorView* in,
                                                    const TensorView*, const dlfuse_attr_t* attrs) {
  if (!present(in[DLFUSE_INPUT(matmul_add_activation_backward, out)])) return DLFUSE_STATUS_OK;
  return out_form_needs_invertible(op, attrs[dlfuse_matmul_add_activation_backward_attr_ACTIVATION].value.i64,
                                   "'pre', which the forward writes");
}

dlfuse_status_t form_add_mul_activation_backward(const OpSpec&, const char* op, const TensorView* in, const TensorView*,
                                                 const dlfuse_attr_t* attrs) {
  if (!present(in[DLFUSE_INPUT(add_mul_activation_backward, out)])) return DLFUSE_STATUS_OK;
  return out_form_needs_invertible(op, attrs[dlfuse_add_mul_activation_backward_attr_ACTIVATION].value.i64,
                                   "x, y and bias instead");
}

// The ops without such rules.
constexpr FormCheck form_matmul_add_relu = nullptr, form_matmul_add_relu_backward = nullptr,
                    form_add_mul_activation = nullptr, form_matmul_add_activation = nullptr,
                    form_matmul_add_residual = nullptr, form_matmul_add_residual_backward = nullptr, form_mlp = nullptr;

// matmul_add_residual: a, b, bias, residual.
dlfuse_status_t check_matmul_add_residual(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  if (auto s = expect_broadcastable(op, "residual", in[3], shape, n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]");
}

// matmul_add_residual_backward: grad_out, a, b -> grad_a, grad_b, grad_bias, grad_residual.
dlfuse_status_t check_matmul_add_residual_backward(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[1], in[2], shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "the forward's out shape")) return s;
  if (present(out[0]))
    if (auto s = expect_shape(op, "grad_a", out[0], in[1].t->shape, in[1].t->ndim, "a's shape")) return s;
  if (present(out[1]))
    if (auto s = expect_shape(op, "grad_b", out[1], in[2].t->shape, in[2].t->ndim, "b's shape")) return s;
  const char* names[2] = {"grad_bias", "grad_residual"};
  return expect_reductions(op, out + 2, names, 2, shape, n);
}

// What the backward of the ops with two forms reads: the output where the activation's
// derivative is a function of it (and, for add_mul_activation_backward, whose `out` is an ABI
// 1.1 input, where the serving kernel takes it), else the inputs or `pre`.
constexpr uint32_t bit(int32_t input) { return 1u << input; }

uint32_t saves_add_mul_activation(const dlfuse_attr_t* canonical, bool takes_newer_inputs) {
  const uint32_t grad_out = bit(DLFUSE_INPUT(add_mul_activation_backward, grad_out));
  if (takes_newer_inputs && derivative_from_out(canonical[dlfuse_add_mul_activation_attr_ACTIVATION].value.i64))
    return grad_out | bit(DLFUSE_INPUT(add_mul_activation_backward, out));
  return grad_out | bit(DLFUSE_INPUT(add_mul_activation_backward, x)) |
         bit(DLFUSE_INPUT(add_mul_activation_backward, y)) | bit(DLFUSE_INPUT(add_mul_activation_backward, bias));
}

uint32_t saves_matmul_add_activation(const dlfuse_attr_t* canonical, bool) {
  const uint32_t common = bit(DLFUSE_INPUT(matmul_add_activation_backward, grad_out)) |
                          bit(DLFUSE_INPUT(matmul_add_activation_backward, a)) |
                          bit(DLFUSE_INPUT(matmul_add_activation_backward, b));
  return common | (derivative_from_out(canonical[dlfuse_matmul_add_activation_attr_ACTIVATION].value.i64)
                       ? bit(DLFUSE_INPUT(matmul_add_activation_backward, out))
                       : bit(DLFUSE_INPUT(matmul_add_activation_backward, pre)));
}

// The ops whose backward reads every tensor of the same name keep no rule.
template <int32_t Op>
constexpr SaveRule kSaveRule = nullptr;
template <>
constexpr SaveRule kSaveRule<DLFUSE_OP_INDEX(add_mul_activation)> = saves_add_mul_activation;
template <>
constexpr SaveRule kSaveRule<DLFUSE_OP_INDEX(matmul_add_activation)> = saves_matmul_add_activation;

OpSpec make_core_spec(int32_t index, ShapeCheck check, FormCheck form, SaveRule save) {
  OpSpec s{};
  s.schema = &core_schema(index);
  s.cache_index = index;
  s.check_shapes = check;
  s.check_form = form;
  s.save_rule = save;
  derive_spec(&s);
  return s;
}

}  // namespace

bool derivative_from_out(int64_t act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

const char* activation_name(int64_t act) {
  static const char* const kNames[DLFUSE_ACT_COUNT] = {"IDENTITY", "RELU",      "SIGMOID", "TANH",
                                                       "GELU_ERF", "GELU_TANH", "SILU"};
  return act >= 0 && act < DLFUSE_ACT_COUNT ? kNames[act] : "?";
}

const OpSpec* core_op(int32_t i) {
// X-lists over ops.def, kept as written:
// clang-format off
#define DLFUSE_OP(op, since) \
  make_core_spec(DLFUSE_OP_INDEX(op), check_##op, form_##op, kSaveRule<DLFUSE_OP_INDEX(op)>),
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
  static const OpSpec kCoreOps[DLFUSE_NUM_CORE_OPS] = {
#include "dlfuse/ops.def"
  };
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
  // clang-format on
  return &kCoreOps[i];
}

const OpSpec* find_core_op(const char* name) {
  if (!name) return nullptr;
  for (int32_t i = 0; i < DLFUSE_NUM_CORE_OPS; ++i)
    if (std::strcmp(core_op(i)->schema->name, name) == 0) return core_op(i);
  return nullptr;
}

}  // namespace dlfuse
