#include "op_validators.hpp"

#include <cstring>
#include <string>

#include "error.hpp"
#include "format.hpp"
#include "layout_cache.hpp"
#include "op_spec.hpp"
#include "tensor_checks.hpp"

namespace dlfuse {

namespace {

const char* attr_type_name(int32_t type) {
  return type == DLFUSE_ATTR_INT64 ? "INT64" : type == DLFUSE_ATTR_FLOAT64 ? "FLOAT64" : "unknown";
}

}  // namespace

dlfuse_status_t canonical_attrs(const OpSpec& spec, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                dlfuse_attr_t* canonical) {
  const dlfuse_op_schema_t& op = *spec.schema;
  if (num_attrs < 0 || (num_attrs > 0 && !attrs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'attrs': %d attributes at %p; expected num_attrs >= 0 "
                "and a non-NULL array when > 0",
                op.name, num_attrs, static_cast<const void*>(attrs));
  bool seen[kMaxAttrs] = {};
  for (int32_t i = 0; i < op.num_attrs; ++i) canonical[i] = op.attrs[i].default_value;
  for (int32_t j = 0; j < num_attrs; ++j) {
    const dlfuse_attr_t& a = attrs[j];
    int32_t i = 0;
    while (i < op.num_attrs && op.attrs[i].default_value.key != a.key) ++i;
    if (i == op.num_attrs) {
      std::string keys;
      for (int32_t k = 0; k < op.num_attrs; ++k)
        keys +=
            std::string(k ? ", " : "") + op.attrs[k].name + " (" + std::to_string(op.attrs[k].default_value.key) + ")";
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attrs[%d]: key is %d; expected one of %s", op.name, j, a.key,
                  keys.empty() ? "none (the op takes no attributes)" : keys.c_str());
    }
    const dlfuse_attr_schema_t& s = op.attrs[i];
    if (seen[i])
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s given twice; expected once", op.name, s.name);
    if (a.type != s.default_value.type)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s: type is %s; expected %s", op.name, s.name,
                  attr_type_name(a.type), attr_type_name(s.default_value.type));
    seen[i] = true;
    canonical[i] = a;
  }
  for (int32_t i = 0; i < op.num_attrs; ++i) {
    const dlfuse_attr_schema_t& s = op.attrs[i];
    const dlfuse_attr_t& a = canonical[i];
    if ((s.flags & DLFUSE_ATTR_REQUIRED) && !seen[i])
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s is missing; expected it (it has no default)",
                  op.name, s.name);
    if (a.type == DLFUSE_ATTR_INT64 && s.min_value <= s.max_value &&
        (a.value.i64 < s.min_value || a.value.i64 > s.max_value))
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: attribute %s is %lld; expected %lld..%lld", op.name, s.name,
                  static_cast<long long>(a.value.i64), static_cast<long long>(s.min_value),
                  static_cast<long long>(s.max_value));
  }
  return DLFUSE_STATUS_OK;
}

namespace {

// Names for messages, without building a string on every call (kMaxArgs == 16).
#define DLFUSE_ARGS16(p)                                                                                        \
  p "[0]", p "[1]", p "[2]", p "[3]", p "[4]", p "[5]", p "[6]", p "[7]", p "[8]", p "[9]", p "[10]", p "[11]", \
      p "[12]", p "[13]", p "[14]", p "[15]"
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
__attribute__((always_inline)) inline dlfuse_status_t check_tensors(const OpSpec* spec, const char* op,
                                                                    const DLTensor* const* inputs, int32_t num_inputs,
                                                                    DLTensor* const* outputs, int32_t num_outputs,
                                                                    TensorView* in, TensorView* out, CallPlan* plan) {
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
      if (spec && !(spec->optional_outputs >> i & 1u))
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor (it is required)",
                    op, name);
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
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                    "%s: argument '%s' overlaps output '%s' in memory; expected disjoint outputs", op,
                    arg_name(spec, true, i), arg_name(spec, true, j));
    for (int32_t j = 0; j < num_inputs; ++j) {
      if (!views_overlap(out[i], in[j])) continue;
      const bool may_alias = spec && j == spec->schema->outputs[i].alias_input;
      if (may_alias && same_view(out[i], in[j])) continue;
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: argument '%s' overlaps input '%s' in memory; expected no overlap%s", op, arg_name(spec, true, i),
                  arg_name(spec, false, j), may_alias ? " other than exactly the same view (in place)" : "");
    }
  }
  return DLFUSE_STATUS_OK;
}

// The full checks of a call of an op with a schema.
inline dlfuse_status_t validate_full(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                                     DLTensor* const* outputs, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                     TensorView* in, TensorView* out, CallPlan* plan) {
  const int32_t n_in = spec.schema->num_inputs, n_out = spec.schema->num_outputs;
  if (auto s = check_tensors(&spec, op, inputs, n_in, outputs, n_out, in, out, plan)) return s;
  if (auto s = check_overlaps(&spec, op, in, n_in, out, n_out)) return s;
  // num_outputs == the schema's, so the shape checks read only views set above.
  if (spec.check_shapes)
    if (auto s = spec.check_shapes(op, in, out)) return s;
  if (auto s = canonical_attrs(spec, attrs, num_attrs, plan->canonical)) return s;
  if (spec.check_form)
    if (auto s = spec.check_form(spec, op, in, out, plan->canonical)) return s;
  return DLFUSE_STATUS_OK;
}

// A core op's call: a remembered layout's repeat (rerunning only what reads data and
// byte_offset), or the full checks, then remembered (layout_cache.hpp). A declared op's
// call: the full checks.
dlfuse_status_t validate_known(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                               DLTensor* const* outputs, const dlfuse_attr_t* attrs, int32_t num_attrs,
                               CallPlan* plan) {
  const int32_t n_in = spec.schema->num_inputs, n_out = spec.schema->num_outputs;
  plan->attrs = plan->canonical;
  plan->num_attrs = spec.schema->num_attrs;
  if (spec.cache_index < 0) {
    TensorView in[kMaxArgs], out[kMaxArgs];  // uninitialized: filled for [0, n_in), [0, n_out)
    return validate_full(spec, op, inputs, outputs, attrs, num_attrs, in, out, plan);
  }
  TensorView in[kLayoutInputs], out[kLayoutOutputs];  // uninitialized: filled for [0, n_in), [0, n_out)
  const LayoutCall call{spec.cache_index, inputs, n_in, outputs, n_out, attrs, num_attrs, spec.schema->num_attrs};
  if (repeat_layout(call, in, out, plan)) {
    for (int32_t i = 0; i < n_in; ++i)
      if (inputs[i])
        if (auto s = check_placement(op, spec.input_names[i], &in[i])) return s;
    for (int32_t i = 0; i < n_out; ++i)
      if (outputs[i])
        if (auto s = check_placement(op, spec.output_names[i], &out[i])) return s;
    return check_overlaps(&spec, op, in, n_in, out, n_out);
  }
  if (auto s = validate_full(spec, op, inputs, outputs, attrs, num_attrs, in, out, plan)) return s;
  remember_layout(call, in, out, *plan);
  return DLFUSE_STATUS_OK;
}

}  // namespace

void derive_spec(OpSpec* spec) {
  const dlfuse_op_schema_t& s = *spec->schema;
  spec->min_inputs = 0;
  spec->optional_inputs = spec->optional_outputs = 0;
  for (int32_t i = 0; i < s.num_inputs; ++i) {
    spec->input_names[i] = s.inputs[i].name;
    if (s.inputs[i].flags & DLFUSE_ARG_OPTIONAL) spec->optional_inputs |= 1u << i;
    if (s.inputs[i].since_minor <= s.since_minor) ++spec->min_inputs;
  }
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    spec->output_names[i] = s.outputs[i].name;
    if (s.outputs[i].flags & DLFUSE_ARG_OPTIONAL) spec->optional_outputs |= 1u << i;
  }
}

const dlfuse_op_schema_t& op_schema(const OpSpec* spec) { return *spec->schema; }
int32_t op_num_inputs(const OpSpec* spec) { return spec->schema->num_inputs; }
int32_t op_min_inputs(const OpSpec* spec) { return spec->min_inputs; }
uint32_t op_since_minor(const OpSpec* spec) { return spec->schema->since_minor; }
const char* op_input_name(const OpSpec* spec, int32_t i) { return spec->input_names[i]; }

dlfuse_status_t validate_call(const OpSpec* spec, const char* op, const DLTensor* const* inputs, int32_t num_inputs,
                              DLTensor* const* outputs, int32_t num_outputs, const dlfuse_attr_t* attrs,
                              int32_t num_attrs, CallPlan* plan) {
  // call_op has already widened an older minor's min_inputs to num_inputs.
  const int32_t want_in = spec ? spec->schema->num_inputs : 0, want_out = spec ? spec->schema->num_outputs : 0;
  if (spec ? num_inputs != want_in : (num_inputs < 0 || num_inputs > kMaxArgs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_inputs is %d; expected %s", op, num_inputs,
                !spec ? "0..16"
                : spec->min_inputs == want_in
                    ? std::to_string(want_in).c_str()
                    : (std::to_string(spec->min_inputs) + " or " + std::to_string(want_in)).c_str());
  if (spec ? num_outputs != want_out : (num_outputs < 1 || num_outputs > kMaxArgs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_outputs is %d; expected %s", op, num_outputs,
                spec ? std::to_string(want_out).c_str() : "1..16");
  if (num_inputs > 0 && !inputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'inputs' is NULL; expected an array of %d tensors", op,
                num_inputs);
  if (!outputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'outputs' is NULL; expected an array of %d tensors", op,
                num_outputs);
  if (spec) return validate_known(*spec, op, inputs, outputs, attrs, num_attrs, plan);

  TensorView in[kMaxArgs], out[kMaxArgs];  // uninitialized: check_tensors fills what is used
  if (auto s = check_tensors(nullptr, op, inputs, num_inputs, outputs, num_outputs, in, out, plan)) return s;
  if (auto s = check_overlaps(nullptr, op, in, num_inputs, out, num_outputs)) return s;
  if (num_attrs < 0 || (num_attrs > 0 && !attrs))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'attrs' is NULL with num_attrs %d; expected an array", op,
                num_attrs);
  plan->attrs = attrs;
  plan->num_attrs = num_attrs;
  return DLFUSE_STATUS_OK;
}

}  // namespace dlfuse
