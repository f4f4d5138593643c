#include "op_validators.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "attrs.hpp"
#include "error.hpp"
#include "format.hpp"
#include "layout_cache.hpp"
#include "tensor_checks.hpp"

namespace dlfuse {

namespace {

struct AttrSpec {
  int32_t key;
  const char* name;
  int32_t type;
  bool required;
  dlfuse_attr_t default_value;
};

using ShapeCheck = dlfuse_status_t (*)(const char* op, const TensorView* in, const TensorView* out);
// Rules that tie which optional inputs are present to the attributes (after both passed).
using FormCheck = dlfuse_status_t (*)(const char* op, const TensorView* in, const dlfuse_attr_t* canonical);

}  // namespace

struct OpSpec {
  const char* name;
  uint32_t since_minor;   // the ABI minor that added the op
  int32_t num_inputs;
  int32_t min_inputs;     // a caller of an older minor may pass only the first min_inputs
  int32_t num_outputs;
  const char* input_names[kLayoutInputs];
  const char* output_names[kLayoutOutputs];
  uint32_t optional_inputs;  // bit i: inputs[i] may be NULL (check_shapes says when)
  bool outputs_optional;     // any output may be NULL
  uint32_t required_outputs; // bit i: outputs[i] may not be NULL even so
  int32_t in_place_input;    // outputs[0] may be exactly this input; -1: none
  ShapeCheck check_shapes;
  FormCheck check_form;      // may be NULL
  int32_t num_attrs;
  AttrSpec attrs[kMaxAttrs];
};

namespace {

std::string shape_of(const TensorView& v) { return shape_string(v.t->shape, v.t->ndim); }

dlfuse_status_t shape_mismatch(const char* op, const char* arg, const std::string& expected,
                               const TensorView& got, const char* why) {
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': shape is %s; expected %s (%s)", op,
              arg, shape_of(got).c_str(), expected.c_str(), why);
}

// out shape of a @ b: broadcast batch dims + [M, N]; also checks a and b themselves.
dlfuse_status_t matmul_out_shape(const char* op, const TensorView& a, const TensorView& b,
                                 int64_t* out, int32_t* nout) {
  const DLTensor* A = a.t;
  const DLTensor* B = b.t;
  if (A->ndim < 2)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'a': ndim is %d; expected >= 2 ([..., M, K])", op, A->ndim);
  if (B->ndim < 2)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'b': ndim is %d; expected >= 2 ([..., K, N])", op, B->ndim);
  const int64_t K = A->shape[A->ndim - 1];
  if (B->shape[B->ndim - 2] != K)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'b': shape[-2] (K) is %lld; expected %lld, a's shape[-1] (a %s, b %s)", op,
                static_cast<long long>(B->shape[B->ndim - 2]), static_cast<long long>(K), shape_of(a).c_str(),
                shape_of(b).c_str());
  if (!broadcast_shapes(A->shape, A->ndim - 2, B->shape, B->ndim - 2, out, nout) || *nout + 2 > kMaxNdim)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: arguments 'a' %s and 'b' %s: batch dims do not broadcast (NumPy rules)", op,
                shape_of(a).c_str(), shape_of(b).c_str());
  out[(*nout)++] = A->shape[A->ndim - 2];
  out[(*nout)++] = B->shape[B->ndim - 1];
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t expect_shape(const char* op, const char* arg, const TensorView& v, const int64_t* shape,
                             int32_t n, const char* why) {
  if (same_shape(v.t->shape, v.t->ndim, shape, n)) return DLFUSE_STATUS_OK;
  return shape_mismatch(op, arg, shape_string(shape, n), v, why);
}

dlfuse_status_t expect_broadcastable(const char* op, const char* arg, const TensorView& v,
                                     const int64_t* shape, int32_t n) {
  if (broadcasts_to(v.t->shape, v.t->ndim, shape, n)) return DLFUSE_STATUS_OK;
  return shape_mismatch(op, arg, "a shape that broadcasts to " + shape_string(shape, n), v,
                        "NumPy broadcasting");
}

dlfuse_status_t check_matmul(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]");
}

dlfuse_status_t check_matmul_backward(const char* op, const TensorView* in, const TensorView* out) {
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
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: arguments 'x' %s and 'y' %s do not broadcast (NumPy rules)",
                op, shape_of(xyb[0]).c_str(), shape_of(xyb[1]).c_str());
  if (!broadcast_shapes(xy, nxy, b->shape, b->ndim, shape, n))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'bias' %s does not broadcast with x and y's shape %s (NumPy rules)", op,
                shape_of(xyb[2]).c_str(), shape_string(xy, nxy).c_str());
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_add_mul(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = pointwise_shape(op, in, shape, &n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "broadcast(x, y, bias)");
}

bool present(const TensorView& v) { return v.t != nullptr; }

dlfuse_status_t expect_absent(const char* op, const char* arg, const TensorView& v, const char* why) {
  if (!present(v)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is given; expected NULL (%s)", op, arg, why);
}

dlfuse_status_t expect_present(const char* op, const char* arg, const TensorView& v, const char* why) {
  if (present(v)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor (%s)", op, arg, why);
}

// Outputs whose shape names the forward input they reduce to: broadcastable to `shape`.
dlfuse_status_t expect_reductions(const char* op, const TensorView* out, const char* const* names, int32_t n,
                                  const int64_t* shape, int32_t nshape) {
  for (int32_t i = 0; i < n; ++i)
    if (present(out[i]))
      if (auto s = expect_broadcastable(op, names[i], out[i], shape, nshape)) return s;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_add_mul_backward(const char* op, const TensorView* in, const TensorView* out) {
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
dlfuse_status_t check_matmul_activation(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  if (auto s = expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]")) return s;
  if (present(out[1])) return expect_shape(op, "pre", out[1], shape, n, "out's shape");
  return DLFUSE_STATUS_OK;
}

// matmul_add_activation_backward: grad_out, a, b, out, pre (exactly one of out and pre).
dlfuse_status_t check_matmul_activation_backward(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[1], in[2], shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "the forward's out shape")) return s;
  if (!present(in[3]) && !present(in[4]))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: arguments 'out' and 'pre' are both NULL; expected exactly one of them",
                op);
  if (present(in[3]) && present(in[4]))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: arguments 'out' and 'pre' are both given; expected exactly one of them",
                op);
  const int which = present(in[3]) ? 3 : 4;
  if (auto s = expect_shape(op, which == 3 ? "out" : "pre", in[which], shape, n, "batch(a, b) + [M, N]")) return s;
  if (present(out[0]))
    if (auto s = expect_shape(op, "grad_a", out[0], in[1].t->shape, in[1].t->ndim, "a's shape")) return s;
  if (present(out[1]))
    if (auto s = expect_shape(op, "grad_b", out[1], in[2].t->shape, in[2].t->ndim, "b's shape")) return s;
  const char* names[1] = {"grad_bias"};
  return expect_reductions(op, out + 2, names, 1, shape, n);
}

// The derivative of these activations is a function of their output (docs/ops.md).
bool invertible_from_out(int64_t act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

const char* const kActivationNames[DLFUSE_ACT_COUNT] = {"IDENTITY", "RELU", "SIGMOID", "TANH",
                                                        "GELU_ERF", "GELU_TANH", "SILU"};

dlfuse_status_t out_form_needs_invertible(const char* op, int64_t act, const char* instead) {
  if (invertible_from_out(act)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
              "%s: argument 'out' is given with ACTIVATION %s; expected IDENTITY, RELU, SIGMOID or TANH with 'out' "
              "(the derivative of %s is not a function of its output: pass %s)",
              op, kActivationNames[act], kActivationNames[act], instead);
}

dlfuse_status_t form_matmul_activation_backward(const char* op, const TensorView* in, const dlfuse_attr_t* attrs) {
  if (!present(in[3])) return DLFUSE_STATUS_OK;
  return out_form_needs_invertible(op, attrs[0].value.i64, "'pre', which the forward writes");
}

dlfuse_status_t form_add_mul_backward(const char* op, const TensorView* in, const dlfuse_attr_t* attrs) {
  if (!present(in[4])) return DLFUSE_STATUS_OK;
  return out_form_needs_invertible(op, attrs[0].value.i64, "x, y and bias instead");
}

// matmul_add_residual: a, b, bias, residual.
dlfuse_status_t check_matmul_residual(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = matmul_out_shape(op, in[0], in[1], shape, &n)) return s;
  if (auto s = expect_broadcastable(op, "bias", in[2], shape, n)) return s;
  if (auto s = expect_broadcastable(op, "residual", in[3], shape, n)) return s;
  return expect_shape(op, "out", out[0], shape, n, "batch(a, b) + [M, N]");
}

// matmul_add_residual_backward: grad_out, a, b -> grad_a, grad_b, grad_bias, grad_residual.
dlfuse_status_t check_matmul_residual_backward(const char* op, const TensorView* in, const TensorView* out) {
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

const AttrSpec kTf32 = {DLFUSE_ATTR_ALLOW_TF32, "ALLOW_TF32", DLFUSE_ATTR_INT64, false,
                        int_attr(DLFUSE_ATTR_ALLOW_TF32, 0)};
const AttrSpec kAct = {DLFUSE_ATTR_ACTIVATION, "ACTIVATION", DLFUSE_ATTR_INT64, true,
                       int_attr(DLFUSE_ATTR_ACTIVATION, 0)};
const AttrSpec kMul = {DLFUSE_ATTR_MULTIPLIER, "MULTIPLIER", DLFUSE_ATTR_FLOAT64, false,
                       float_attr(DLFUSE_ATTR_MULTIPLIER, 1.0)};

// Positional: {name, since_minor, num_inputs, min_inputs, num_outputs, input_names,
// output_names, optional_inputs, outputs_optional, required_outputs, in_place_input,
// check_shapes, check_form, num_attrs, attrs}.
const OpSpec kOps[] = {
    {/* .name = */ DLFUSE_OP_MATMUL_ADD_RELU, /* .since_minor = */ 0, 3, 3, 1, {"a", "b", "bias"}, {"out"},
     /* .optional_inputs = */ 0, /* .outputs_optional = */ false, 0, /* .in_place_input = */ -1, check_matmul,
     nullptr, 1, {kTf32}},
    {DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, 0, 4, 4, 3, {"grad_out", "a", "b", "out"}, {"grad_a", "grad_b", "grad_bias"},
     0, true, 0, -1, check_matmul_backward, nullptr, 1, {kTf32}},
    {DLFUSE_OP_ADD_MUL_ACTIVATION, 0, 3, 3, 1, {"x", "y", "bias"}, {"out"}, 0, false, 0, /* out is x */ 0,
     check_add_mul, nullptr, 2, {kAct, kMul}},
    // ABI 1.1 appended `out` (input 4); a 1.0 caller passes 4 inputs, x, y and bias.
    {DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, 0, 5, 4, 3, {"grad_out", "x", "y", "bias", "out"},
     {"grad_x", "grad_y", "grad_bias"}, /* x, y, bias, out */ 0x1e, true, 0, -1, check_add_mul_backward,
     form_add_mul_backward, 2, {kAct, kMul}},
    {DLFUSE_OP_MATMUL_ADD_ACTIVATION, 1, 3, 3, 2, {"a", "b", "bias"}, {"out", "pre"}, 0, true, /* out */ 0x1, -1,
     check_matmul_activation, nullptr, 2, {kAct, kTf32}},
    {DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, 1, 5, 5, 3, {"grad_out", "a", "b", "out", "pre"},
     {"grad_a", "grad_b", "grad_bias"}, /* out, pre */ 0x18, true, 0, -1, check_matmul_activation_backward,
     form_matmul_activation_backward, 2, {kAct, kTf32}},
    {DLFUSE_OP_MATMUL_ADD_RESIDUAL, 1, 4, 4, 1, {"a", "b", "bias", "residual"}, {"out"}, 0, false, 0,
     /* out is residual */ 3, check_matmul_residual, nullptr, 1, {kTf32}},
    {DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, 1, 3, 3, 4, {"grad_out", "a", "b"},
     {"grad_a", "grad_b", "grad_bias", "grad_residual"}, 0, true, 0, -1, check_matmul_residual_backward, nullptr, 1,
     {kTf32}},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kKnownOps, "layout_cache.hpp sizes its table by kKnownOps");

const char* attr_type_name(int32_t type) {
  return type == DLFUSE_ATTR_INT64 ? "INT64" : type == DLFUSE_ATTR_FLOAT64 ? "FLOAT64" : "unknown";
}

// Fills `canonical` with every attribute of the op, in spec order, defaults filled.
dlfuse_status_t canonical_attrs(const OpSpec& spec, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                dlfuse_attr_t* canonical) {
  if (num_attrs < 0 || (num_attrs > 0 && !attrs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'attrs': %d attributes at %p; expected num_attrs >= 0 "
                "and a non-NULL array when > 0", spec.name, num_attrs, static_cast<const void*>(attrs));
  bool seen[kMaxAttrs] = {};
  for (int32_t i = 0; i < spec.num_attrs; ++i) canonical[i] = spec.attrs[i].default_value;
  for (int32_t j = 0; j < num_attrs; ++j) {
    const dlfuse_attr_t& a = attrs[j];
    int32_t i = 0;
    while (i < spec.num_attrs && spec.attrs[i].key != a.key) ++i;
    if (i == spec.num_attrs) {
      std::string keys;
      for (int32_t k = 0; k < spec.num_attrs; ++k)
        keys += std::string(k ? ", " : "") + spec.attrs[k].name + " (" + std::to_string(spec.attrs[k].key) + ")";
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attrs[%d]: key is %d; expected one of %s", spec.name, j, a.key,
                  keys.c_str());
    }
    const AttrSpec& s = spec.attrs[i];
    if (seen[i]) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s given twice; expected once", spec.name, s.name);
    if (a.type != s.type)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s: type is %s; expected %s", spec.name, s.name,
                  attr_type_name(a.type), attr_type_name(s.type));
    seen[i] = true;
    canonical[i] = a;
  }
  for (int32_t i = 0; i < spec.num_attrs; ++i) {
    const AttrSpec& s = spec.attrs[i];
    const dlfuse_attr_t& a = canonical[i];
    if (s.required && !seen[i])
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s is missing; expected it (it has no default)",
                  spec.name, s.name);
    if (s.key == DLFUSE_ATTR_ACTIVATION && (a.value.i64 < 0 || a.value.i64 >= DLFUSE_ACT_COUNT))
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute ACTIVATION is %lld; expected 0..%d (dlfuse_activation_t)",
                  spec.name, static_cast<long long>(a.value.i64), DLFUSE_ACT_COUNT - 1);
    if (s.key == DLFUSE_ATTR_ALLOW_TF32 && a.value.i64 != 0 && a.value.i64 != 1)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute ALLOW_TF32 is %lld; expected 0 or 1", spec.name,
                  static_cast<long long>(a.value.i64));
  }
  return DLFUSE_STATUS_OK;
}

// Names for messages, without building a string on every call (kMaxArgs == 16).
#define DLFUSE_ARGS16(p) p "[0]", p "[1]", p "[2]", p "[3]", p "[4]", p "[5]", p "[6]", p "[7]", p "[8]", \
    p "[9]", p "[10]", p "[11]", p "[12]", p "[13]", p "[14]", p "[15]"
const char* const kInputNames[kMaxArgs] = {DLFUSE_ARGS16("inputs")};
const char* const kOutputNames[kMaxArgs] = {DLFUSE_ARGS16("outputs")};
#undef DLFUSE_ARGS16

const char* arg_name(const OpSpec* spec, bool output, int32_t i) {
  if (spec) return output ? spec->output_names[i] : spec->input_names[i];
  return output ? kOutputNames[i] : kInputNames[i];
}

__attribute__((noinline, cold)) dlfuse_status_t mismatch_message(const char* op, const char* name, const DLTensor* t,
                                                                const DLTensor* first, const char* first_name) {
  if (t->dtype.code != first->dtype.code || t->dtype.bits != first->dtype.bits)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': dtype is %s; expected %s, the dtype of '%s'", op,
                name, dtype_name(t->dtype).c_str(), dtype_name(first->dtype).c_str(), first_name);
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': device is %s; expected %s, the device of '%s'", op,
              name, device_name(t->device).c_str(), device_name(first->device).c_str(), first_name);
}

// Every tensor shares the first one's dtype and device. The mismatch message is built out
// of line (mismatch_message): the check itself stays a few inlined compares.
inline dlfuse_status_t check_common(const char* op, const TensorView& v, const char* name, const DLTensor** first,
                                    const char** first_name) {
  if (!*first) {
    *first = v.t;
    *first_name = name;
    return DLFUSE_STATUS_OK;
  }
  const DLTensor* f = *first;
  if (__builtin_expect(v.t->dtype.code != f->dtype.code || v.t->dtype.bits != f->dtype.bits ||
                           v.t->device.device_type != f->device.device_type ||
                           v.t->device.device_id != f->device.device_id,
                       0))
    return mismatch_message(op, name, v.t, f, *first_name);
  return DLFUSE_STATUS_OK;
}

// Every tensor's own checks, in argument order (inputs, then outputs), and the common
// dtype and device. A NULL output gets a view with t == NULL and numel 0.
__attribute__((always_inline)) inline dlfuse_status_t check_tensors(const OpSpec* spec, const char* op, const DLTensor* const* inputs, int32_t num_inputs,
                              DLTensor* const* outputs, int32_t num_outputs, TensorView* in, TensorView* out,
                              CallPlan* plan) {
  const DLTensor* first = nullptr;
  const char* first_name = "";
  for (int32_t i = 0; i < num_inputs; ++i) {
    const char* name = arg_name(spec, false, i);
    if (!inputs[i] && spec && (spec->optional_inputs >> i & 1u)) {
      in[i].t = nullptr;  // absent: the op's shape check says whether that is allowed here
      in[i].numel = 0;
      continue;
    }
    if (auto s = check_tensor(op, name, inputs[i], false, &in[i])) return s;
    if (auto s = check_common(op, in[i], name, &first, &first_name)) return s;
  }
  bool any_output = false, all_empty = true;
  for (int32_t i = 0; i < num_outputs; ++i) {
    const char* name = arg_name(spec, true, i);
    if (!outputs[i]) {
      out[i].t = nullptr;
      out[i].numel = 0;
      if (spec && (!spec->outputs_optional || (spec->required_outputs >> i & 1u)))
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor (it is required)", op,
                    name);
      continue;
    }
    if (auto s = check_tensor(op, name, outputs[i], true, &out[i])) return s;
    if (auto s = check_common(op, out[i], name, &first, &first_name)) return s;
    any_output = true;
    all_empty = all_empty && out[i].numel == 0;
  }
  plan->device = first ? first->device : DLDevice{kDLCPU, 0};
  plan->dtype = first ? first->dtype : DLDataType{kDLFloat, 32, 1};
  plan->skip = !any_output || all_empty;
  return DLFUSE_STATUS_OK;
}

// Outputs: no overlap with each other, nor with inputs but for the one exact in-place case.
dlfuse_status_t check_overlaps(const OpSpec* spec, const char* op, const TensorView* in, int32_t num_inputs,
                               const TensorView* out, int32_t num_outputs) {
  for (int32_t i = 0; i < num_outputs; ++i) {
    if (!out[i].t) continue;
    for (int32_t j = 0; j < i; ++j)
      if (out[j].t && views_overlap(out[i], out[j]))
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' overlaps output '%s' in memory; expected disjoint outputs",
                    op, arg_name(spec, true, i), arg_name(spec, true, j));
    for (int32_t j = 0; j < num_inputs; ++j) {
      if (!views_overlap(out[i], in[j])) continue;
      const bool may_alias = spec && i == 0 && j == spec->in_place_input;
      if (may_alias && same_view(out[0], in[j])) continue;
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' overlaps input '%s' in memory; expected no overlap%s", op,
                  arg_name(spec, true, i), arg_name(spec, false, j),
                  may_alias ? " other than exactly the same view (in place)" : "");
    }
  }
  return DLFUSE_STATUS_OK;
}

// A known op's call: a remembered layout's repeat (rerunning only what reads data and
// byte_offset), or the full checks, then remembered (layout_cache.hpp).
dlfuse_status_t validate_known(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                               DLTensor* const* outputs, const dlfuse_attr_t* attrs, int32_t num_attrs,
                               CallPlan* plan) {
  const int32_t n_in = spec.num_inputs, n_out = spec.num_outputs;
  const int32_t op_index = int32_t(&spec - kOps);
  TensorView in[kLayoutInputs], out[kLayoutOutputs];  // uninitialized: filled for [0, n_in), [0, n_out)
  const LayoutCall call{op_index, inputs, n_in, outputs, n_out, attrs, num_attrs, spec.num_attrs};
  if (repeat_layout(call, in, out, plan)) {
    for (int32_t i = 0; i < n_in; ++i)
      if (inputs[i])
        if (auto s = check_placement(op, spec.input_names[i], &in[i])) return s;
    for (int32_t i = 0; i < n_out; ++i)
      if (outputs[i])
        if (auto s = check_placement(op, spec.output_names[i], &out[i])) return s;
    if (auto s = check_overlaps(&spec, op, in, n_in, out, n_out)) return s;
  } else {
    if (auto s = check_tensors(&spec, op, inputs, n_in, outputs, n_out, in, out, plan)) return s;
    if (auto s = check_overlaps(&spec, op, in, n_in, out, n_out)) return s;
    // num_outputs == spec.num_outputs, so the shape checks read only views set above.
    if (auto s = spec.check_shapes(op, in, out)) return s;
    if (auto s = canonical_attrs(spec, attrs, num_attrs, plan->canonical)) return s;
    if (spec.check_form)
      if (auto s = spec.check_form(op, in, plan->canonical)) return s;
    remember_layout(call, in, out, *plan);
  }
  plan->attrs = plan->canonical;
  plan->num_attrs = spec.num_attrs;
  return DLFUSE_STATUS_OK;
}

}  // namespace

int32_t op_num_inputs(const OpSpec* spec) { return spec->num_inputs; }
int32_t op_min_inputs(const OpSpec* spec) { return spec->min_inputs; }
uint32_t op_since_minor(const OpSpec* spec) { return spec->since_minor; }
const char* op_input_name(const OpSpec* spec, int32_t i) { return spec->input_names[i]; }

const OpSpec* find_known_op(const char* name) {
  if (!name) return nullptr;
  for (const OpSpec& s : kOps)
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

dlfuse_status_t validate_call(const OpSpec* spec, const char* op, const DLTensor* const* inputs,
                              int32_t num_inputs, DLTensor* const* outputs, int32_t num_outputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, CallPlan* plan) {
  // call_op has already widened an older minor's min_inputs to num_inputs.
  if (spec ? num_inputs != spec->num_inputs : (num_inputs < 0 || num_inputs > kMaxArgs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_inputs is %d; expected %s", op, num_inputs,
                !spec ? "0..16"
                : spec->min_inputs == spec->num_inputs
                    ? std::to_string(spec->num_inputs).c_str()
                    : (std::to_string(spec->min_inputs) + " or " + std::to_string(spec->num_inputs)).c_str());
  if (spec ? num_outputs != spec->num_outputs : (num_outputs < 1 || num_outputs > kMaxArgs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_outputs is %d; expected %s", op, num_outputs,
                spec ? std::to_string(spec->num_outputs).c_str() : "1..16");
  if (num_inputs > 0 && !inputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'inputs' is NULL; expected an array of %d tensors", op, num_inputs);
  if (!outputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'outputs' is NULL; expected an array of %d tensors", op, num_outputs);
  if (spec) return validate_known(*spec, op, inputs, outputs, attrs, num_attrs, plan);

  TensorView in[kMaxArgs], out[kMaxArgs];  // uninitialized: check_tensors fills what is used
  if (auto s = check_tensors(nullptr, op, inputs, num_inputs, outputs, num_outputs, in, out, plan)) return s;
  if (auto s = check_overlaps(nullptr, op, in, num_inputs, out, num_outputs)) return s;
  if (num_attrs < 0 || (num_attrs > 0 && !attrs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'attrs' is NULL with num_attrs %d; expected an array", op, num_attrs);
  plan->attrs = attrs;
  plan->num_attrs = num_attrs;
  return DLFUSE_STATUS_OK;
}

}  // namespace dlfuse
