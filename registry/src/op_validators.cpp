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

}  // namespace

struct OpSpec {
  const char* name;
  int32_t num_inputs;
  int32_t num_outputs;
  const char* input_names[4];
  const char* output_names[3];
  bool outputs_optional;
  bool in_place_out_x;  // outputs[0] may be exactly inputs[0]
  ShapeCheck check_shapes;
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

dlfuse_status_t check_add_mul_backward(const char* op, const TensorView* in, const TensorView* out) {
  int64_t shape[kMaxNdim];
  int32_t n;
  if (auto s = pointwise_shape(op, in + 1, shape, &n)) return s;
  if (auto s = expect_shape(op, "grad_out", in[0], shape, n, "broadcast(x, y, bias)")) return s;
  const char* names[3] = {"grad_x", "grad_y", "grad_bias"};
  const char* whose[3] = {"x's shape", "y's shape", "bias's shape"};
  for (int i = 0; i < 3; ++i) {
    if (!out[i].t) continue;
    if (auto s = expect_shape(op, names[i], out[i], in[1 + i].t->shape, in[1 + i].t->ndim, whose[i])) return s;
  }
  return DLFUSE_STATUS_OK;
}

const AttrSpec kTf32 = {DLFUSE_ATTR_ALLOW_TF32, "ALLOW_TF32", DLFUSE_ATTR_INT64, false,
                        int_attr(DLFUSE_ATTR_ALLOW_TF32, 0)};
const AttrSpec kAct = {DLFUSE_ATTR_ACTIVATION, "ACTIVATION", DLFUSE_ATTR_INT64, true,
                       int_attr(DLFUSE_ATTR_ACTIVATION, 0)};
const AttrSpec kMul = {DLFUSE_ATTR_MULTIPLIER, "MULTIPLIER", DLFUSE_ATTR_FLOAT64, false,
                       float_attr(DLFUSE_ATTR_MULTIPLIER, 1.0)};

const OpSpec kOps[] = {
    {DLFUSE_OP_MATMUL_ADD_RELU, 3, 1, {"a", "b", "bias"}, {"out"}, false, false, check_matmul, 1, {kTf32}},
    {DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, 4, 3, {"grad_out", "a", "b", "out"}, {"grad_a", "grad_b", "grad_bias"},
     true, false, check_matmul_backward, 1, {kTf32}},
    {DLFUSE_OP_ADD_MUL_ACTIVATION, 3, 1, {"x", "y", "bias"}, {"out"}, false, true, check_add_mul, 2, {kAct, kMul}},
    {DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, 4, 3, {"grad_out", "x", "y", "bias"}, {"grad_x", "grad_y", "grad_bias"},
     true, false, check_add_mul_backward, 2, {kAct, kMul}},
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
    if (auto s = check_tensor(op, name, inputs[i], false, &in[i])) return s;
    if (auto s = check_common(op, in[i], name, &first, &first_name)) return s;
  }
  bool any_output = false, all_empty = true;
  for (int32_t i = 0; i < num_outputs; ++i) {
    const char* name = arg_name(spec, true, i);
    if (!outputs[i]) {
      out[i].t = nullptr;
      out[i].numel = 0;
      if (spec && !spec->outputs_optional)
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
      if (spec && spec->in_place_out_x && i == 0 && j == 0 && same_view(out[0], in[0])) continue;
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' overlaps input '%s' in memory; expected no overlap%s", op,
                  arg_name(spec, true, i), arg_name(spec, false, j),
                  spec && spec->in_place_out_x && i == 0 && j == 0
                      ? " other than exactly the same view (in place)" : "");
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
    remember_layout(call, in, out, *plan);
  }
  plan->attrs = plan->canonical;
  plan->num_attrs = spec.num_attrs;
  return DLFUSE_STATUS_OK;
}

}  // namespace

const OpSpec* find_known_op(const char* name) {
  if (!name) return nullptr;
  for (const OpSpec& s : kOps)
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

dlfuse_status_t validate_call(const OpSpec* spec, const char* op, const DLTensor* const* inputs,
                              int32_t num_inputs, DLTensor* const* outputs, int32_t num_outputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, CallPlan* plan) {
  if (spec ? num_inputs != spec->num_inputs : (num_inputs < 0 || num_inputs > kMaxArgs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_inputs is %d; expected %s", op, num_inputs,
                spec ? std::to_string(spec->num_inputs).c_str() : "0..16");
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
