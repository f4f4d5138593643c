// Output shapes by the schema's rules (dlfuse/ops.h, dlfuse_shape_rule_t): what
// dlfuse_op_infer_outputs answers, and how the calls of plugin-declared ops are checked.
#include <cstring>
#include <memory>
#include <string>

#include "error.hpp"
#include "format.hpp"
#include "op_spec.hpp"
#include "shape_checks.hpp"
#include "shape_rules.h"

namespace dlfuse {
namespace {

const char* rule_name(int32_t rule) {
  switch (rule) {
    case DLFUSE_SHAPE_MATMUL: return "MATMUL";
    case DLFUSE_SHAPE_BROADCAST: return "BROADCAST";
    case DLFUSE_SHAPE_LIKE: return "LIKE";
    case DLFUSE_SHAPE_CALLBACK: return "CALLBACK";
    default: return "unknown";
  }
}

// "'a', 'b'": the inputs a rule reads.
std::string rule_inputs(const dlfuse_op_schema_t& s, uint32_t bits) {
  std::string names;
  for (int32_t j = 0; j < s.num_inputs; ++j)
    if (bits >> j & 1u) names += (names.empty() ? "'" : ", '") + std::string(s.inputs[j].name) + "'";
  return names;
}

dlfuse_status_t callback_shape(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                               const dlfuse_attr_t* canonical, int32_t i, int64_t* shape, int32_t* ndim) {
  const dlfuse_op_schema_t& s = *spec.schema;
  char err[512] = "";
  int status;
  int32_t n = -1;
  try {
    status = s.shape_fn(inputs, s.num_inputs, canonical, s.num_attrs, i, &n, shape, err, sizeof err);
  } catch (...) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: the shape callback of output '%s' threw across the C ABI", op,
                s.outputs[i].name);
  }
  err[sizeof err - 1] = '\0';
  if (status != DLFUSE_STATUS_OK)
    return fail(is_known_status(status) ? static_cast<dlfuse_status_t>(status) : DLFUSE_STATUS_INTERNAL,
                "%s: output '%s': %s", op, s.outputs[i].name, err[0] ? err : "(the shape callback gave no message)");
  if (n < 0 || n > kMaxNdim)
    return fail(DLFUSE_STATUS_INTERNAL, "%s: the shape callback of output '%s' gave ndim %d; expected 0..%d", op,
                s.outputs[i].name, n, kMaxNdim);
  for (int32_t d = 0; d < n; ++d)
    if (shape[d] < 0)
      return fail(DLFUSE_STATUS_INTERNAL, "%s: the shape callback of output '%s' gave shape[%d] = %lld; expected >= 0",
                  op, s.outputs[i].name, d, static_cast<long long>(shape[d]));
  *ndim = n;
  return DLFUSE_STATUS_OK;
}

// Whether a named rule has the inputs it reads (MATMUL both, BROADCAST and LIKE one at
// least): without them an absent output's rule has no relation between inputs to check. A
// shape callback runs on whatever inputs are present.
bool rule_has_inputs(const dlfuse_op_schema_t& s, const dlfuse_arg_schema_t& o, const DLTensor* const* in) {
  if (o.shape_rule == DLFUSE_SHAPE_CALLBACK) return true;
  int32_t read = 0, given = 0;
  for (int32_t j = 0; j < s.num_inputs; ++j)
    if (o.shape_inputs >> j & 1u) {
      ++read;
      given += in[j] != nullptr;
    }
  return o.shape_rule == DLFUSE_SHAPE_MATMUL ? given == read : given > 0;
}

// Declared ops: every output's rule runs, present or not, since a rule is also where the
// inputs' relations are checked (a backward called without grad_x still needs an x that
// broadcasts to grad_out); then every present output has its rule's shape (or one
// broadcasting to it, for a REDUCIBLE output).
dlfuse_status_t check_by_rules(const OpSpec& spec, const char* op, const TensorView* in, const TensorView* out,
                               const dlfuse_attr_t* canonical) {
  const dlfuse_op_schema_t& s = *spec.schema;
  const DLTensor* raw[kMaxArgs];
  for (int32_t j = 0; j < s.num_inputs; ++j) raw[j] = in[j].t;
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    const bool given = present(out[i]);
    if (!given && !rule_has_inputs(s, s.outputs[i], raw)) continue;
    int64_t shape[kMaxNdim];
    int32_t n = 0;
    if (auto st = rule_shape(spec, op, raw, canonical, i, shape, &n)) return st;
    if (!given) continue;
    if (s.outputs[i].flags & DLFUSE_ARG_REDUCIBLE) {
      if (auto st = expect_broadcastable(op, s.outputs[i].name, out[i], shape, n)) return st;
    } else {
      const std::string why = std::string("rule ") + rule_name(s.outputs[i].shape_rule) + " of " +
                              rule_inputs(s, s.outputs[i].shape_inputs);
      if (auto st = expect_shape(op, s.outputs[i].name, out[i], shape, n, why.c_str())) return st;
    }
  }
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t bad_layout(const char* op, const char* name, const DLTensor* t) {
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
              "%s: argument '%s': ndim is %d with shape %p; expected 0..%d dims "
              "and a shape array",
              op, name, t->ndim, static_cast<const void*>(t->shape), kMaxNdim);
}

bool valid_identifier(const char* name) {
  if (!name || !*name || std::strlen(name) > 64) return false;
  for (const char* c = name; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) return false;
  return true;
}

int popcount(uint32_t v) { return __builtin_popcount(v); }

std::string check_output(const dlfuse_op_schema_t& s, int32_t i) {
  const dlfuse_arg_schema_t& o = s.outputs[i];
  const std::string where = "output " + std::to_string(i) + " ('" + o.name + "'): ";
  const uint32_t all = s.num_inputs >= 32 ? ~0u : (1u << s.num_inputs) - 1;
  if (o.flags & ~(DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE))
    return where + "flags are " + std::to_string(o.flags) + "; expected DLFUSE_ARG_* bits";
  if (o.shape_inputs & ~all) return where + "shape_inputs names inputs past the op's " + std::to_string(s.num_inputs);
  if (o.alias_input < -1 || o.alias_input >= s.num_inputs)
    return where + "alias_input is " + std::to_string(o.alias_input) + "; expected -1.." +
           std::to_string(s.num_inputs - 1);
  switch (o.shape_rule) {
    case DLFUSE_SHAPE_MATMUL:
      if (popcount(o.shape_inputs) != 2)
        return where + "rule MATMUL reads exactly two inputs; shape_inputs has " +
               std::to_string(popcount(o.shape_inputs));
      return "";
    case DLFUSE_SHAPE_BROADCAST:
    case DLFUSE_SHAPE_LIKE:
      if (!o.shape_inputs) return where + std::string("rule ") + rule_name(o.shape_rule) + " reads no input";
      return "";
    case DLFUSE_SHAPE_CALLBACK:
      if (!s.shape_fn) return where + "rule CALLBACK without a shape_fn";
      return "";
    default: return where + "shape_rule is " + std::to_string(o.shape_rule) + "; expected a dlfuse_shape_rule_t";
  }
}

// The op's own shape and form rules on its inputs with every output at its inferred shape:
// inference refuses what a call would refuse for its shapes, optional inputs or attributes
// (a bias that does not broadcast, both of `out` and `pre`), so that a caller that has only
// shapes (a tracer, a fake kernel) reports it where the call is written.
dlfuse_status_t check_inferred(const OpSpec& spec, const char* op, const DLTensor* const* in,
                               const dlfuse_attr_t* canonical, const int32_t* ndims, int64_t* shapes,
                               DLDataType dtype) {
  const dlfuse_op_schema_t& s = *spec.schema;
  TensorView iv[kMaxArgs] = {}, ov[kMaxArgs] = {};  // the checks read only .t
  DLTensor outs[kMaxArgs] = {};
  for (int32_t j = 0; j < s.num_inputs; ++j) iv[j].t = in[j];
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    outs[i].ndim = ndims[i];
    outs[i].shape = shapes + size_t(i) * kMaxNdim;
    outs[i].dtype = dtype;
    ov[i].t = &outs[i];
  }
  if (spec.check_shapes)
    if (auto st = spec.check_shapes(op, iv, ov)) return st;
  // A declared op's form check compares the outputs with the rules that just inferred them
  // (its shape callback called again): nothing to learn.
  if (!spec.check_form || spec.check_form == check_by_rules) return DLFUSE_STATUS_OK;
  return spec.check_form(spec, op, iv, ov, canonical);
}

}  // namespace

// The named rules are shape_rules.c's (the Python extension sizes outputs by the same code);
// here they get their messages.
dlfuse_status_t rule_shape(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                           const dlfuse_attr_t* canonical, int32_t i, int64_t* shape, int32_t* ndim) {
  const dlfuse_op_schema_t& s = *spec.schema;
  const dlfuse_arg_schema_t& o = s.outputs[i];
  const uint32_t bits = o.shape_inputs;
  if (o.shape_rule == DLFUSE_SHAPE_CALLBACK) return callback_shape(spec, op, inputs, canonical, i, shape, ndim);
  int32_t at = -1;
  switch (dlfuse_shape_by_rule(o.shape_rule, bits, inputs, s.num_inputs, shape, ndim, &at)) {
    case DLFUSE_SHAPE_RULE_OK: return DLFUSE_STATUS_OK;
    case DLFUSE_SHAPE_RULE_BAD_TENSOR:  // inputs are checked before any rule runs
      return bad_layout(op, s.inputs[at].name, inputs[at]);
    case DLFUSE_SHAPE_RULE_ABSENT:
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: argument '%s' is NULL; expected a DLTensor (output '%s' "
                  "is computed from it)",
                  op, s.inputs[at].name, o.name);
    case DLFUSE_SHAPE_RULE_NO_MATMUL: {  // matmul_out_shape says which dims do not fit
      int32_t ab[2] = {-1, -1}, k = 0;
      for (int32_t j = 0; j < s.num_inputs && k < 2; ++j)
        if (bits >> j & 1u) ab[k++] = j;
      return matmul_out_shape(op, inputs[ab[0]], inputs[ab[1]], s.inputs[ab[0]].name, s.inputs[ab[1]].name, shape,
                              ndim);
    }
    case DLFUSE_SHAPE_RULE_NO_BROADCAST: {  // the shape holds the broadcast of the inputs before `at`
      std::string so_far;
      for (int32_t j = 0; j < at; ++j)
        if (bits >> j & 1u && inputs[j]) so_far += (so_far.empty() ? "" : " and ") + std::string(s.inputs[j].name);
      const DLTensor* t = inputs[at];
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: argument '%s' %s does not broadcast with %s's shape %s (NumPy rules)", op, s.inputs[at].name,
                  shape_string(t->shape, t->ndim).c_str(), so_far.c_str(), shape_string(shape, *ndim).c_str());
    }
    case DLFUSE_SHAPE_RULE_NO_INPUT:
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: output '%s' has its shape from %s; expected at least one of "
                  "them, got none",
                  op, o.name, rule_inputs(s, bits).c_str());
    case DLFUSE_SHAPE_RULE_NOT_NAMED: break;
  }
  return fail(DLFUSE_STATUS_INTERNAL, "%s: output '%s' has shape rule %d, which is not a dlfuse_shape_rule_t", op,
              o.name, o.shape_rule);
}

dlfuse_status_t infer_outputs(const OpSpec& spec, const DLTensor* const* inputs, int32_t num_inputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, int32_t* ndims, int64_t* shapes,
                              DLDataType* dtypes) {
  const dlfuse_op_schema_t& s = *spec.schema;
  const char* op = s.name;
  if (num_inputs != s.num_inputs && num_inputs != spec.min_inputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: num_inputs is %d; expected %d", op, num_inputs, s.num_inputs);
  if (num_inputs > 0 && !inputs)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'inputs' is NULL; expected an array of %d tensors", op,
                num_inputs);
  const DLTensor* in[kMaxArgs] = {};  // an older minor's call: the newer inputs absent
  const DLTensor* first = nullptr;
  for (int32_t j = 0; j < num_inputs; ++j) {
    const DLTensor* t = inputs[j];
    const char* name = s.inputs[j].name;
    in[j] = t;
    if (!t) {
      if (spec.optional_inputs >> j & 1u) continue;
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor", op, name);
    }
    if (t->ndim < 0 || t->ndim > kMaxNdim || (t->ndim > 0 && !t->shape)) return bad_layout(op, name, t);
    for (int32_t d = 0; d < t->ndim; ++d)
      if (t->shape[d] < 0)
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': shape[%d] is %lld; expected >= 0", op, name, d,
                    static_cast<long long>(t->shape[d]));
    if (!first) {
      first = t;
    } else if (t->dtype.code != first->dtype.code || t->dtype.bits != first->dtype.bits ||
               t->dtype.lanes != first->dtype.lanes) {
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: argument '%s': dtype is %s; expected %s, the dtype of the "
                  "first input given",
                  op, name, dtype_name(t->dtype).c_str(), dtype_name(first->dtype).c_str());
    }
  }
  dlfuse_attr_t canonical[kMaxAttrs];
  if (auto st = canonical_attrs(spec, attrs, num_attrs, canonical)) return st;
  const DLDataType dtype = first ? first->dtype : DLDataType{kDLFloat, 32, 1};
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    if (auto st = rule_shape(spec, op, in, canonical, i, shapes + size_t(i) * kMaxNdim, &ndims[i])) return st;
    dtypes[i] = dtype;
  }
  return check_inferred(spec, op, in, canonical, ndims, shapes, dtype);
}

std::string check_declared_schema(const dlfuse_op_schema_t& s) {
  if (s.struct_size < offsetof(dlfuse_op_schema_t, shape_fn) + sizeof(s.shape_fn))
    return "schema struct_size is " + std::to_string(s.struct_size) + "; expected at least " +
           std::to_string(offsetof(dlfuse_op_schema_t, shape_fn) + sizeof(s.shape_fn));
  if (!valid_identifier(s.name)) return "schema name is invalid; expected 1-64 characters of [A-Za-z0-9_]";
  const std::string op = std::string("schema of '") + s.name + "': ";
  if (s.num_inputs < 0 || s.num_inputs > kMaxArgs || (s.num_inputs > 0 && !s.inputs))
    return op + "num_inputs is " + std::to_string(s.num_inputs) + "; expected 0..16 with an inputs array";
  if (s.num_outputs < 1 || s.num_outputs > kMaxArgs || !s.outputs)
    return op + "num_outputs is " + std::to_string(s.num_outputs) + "; expected 1..16 with an outputs array";
  if (s.num_attrs < 0 || s.num_attrs > kMaxAttrs || (s.num_attrs > 0 && !s.attrs))
    return op + "num_attrs is " + std::to_string(s.num_attrs) + "; expected 0.." + std::to_string(kMaxAttrs) +
           " with an attrs array";
  std::vector<std::string> names;
  for (int32_t k = 0; k < s.num_inputs + s.num_outputs; ++k) {
    const dlfuse_arg_schema_t& a = k < s.num_inputs ? s.inputs[k] : s.outputs[k - s.num_inputs];
    if (!valid_identifier(a.name)) return op + "argument " + std::to_string(k) + "'s name is invalid";
    for (const std::string& n : names)
      if (n == a.name) return op + "argument name '" + n + "' appears twice";
    names.push_back(a.name);
    if (k < s.num_inputs && (a.flags & ~DLFUSE_ARG_OPTIONAL))
      return op + "input '" + a.name + "': flags are " + std::to_string(a.flags) +
             "; expected 0 or DLFUSE_ARG_OPTIONAL";
  }
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    const std::string why = check_output(s, i);
    if (!why.empty()) return op + why;
  }
  for (int32_t k = 0; k < s.num_attrs; ++k) {
    const dlfuse_attr_schema_t& a = s.attrs[k];
    if (!valid_identifier(a.name)) return op + "attribute " + std::to_string(k) + "'s name is invalid";
    if (a.default_value.type != DLFUSE_ATTR_INT64 && a.default_value.type != DLFUSE_ATTR_FLOAT64)
      return op + "attribute " + a.name + ": type is " + std::to_string(a.default_value.type) +
             "; expected DLFUSE_ATTR_INT64 or DLFUSE_ATTR_FLOAT64";
    if (a.flags & ~DLFUSE_ATTR_REQUIRED) return op + "attribute " + a.name + ": flags are not DLFUSE_ATTR_* bits";
    for (int32_t j = 0; j < k; ++j)
      if (s.attrs[j].default_value.key == a.default_value.key)
        return op + "attribute key " + std::to_string(a.default_value.key) + " appears twice";
  }
  return "";
}

std::unique_ptr<OpSpec> make_declared_spec(const dlfuse_op_schema_t* schema) {
  auto spec = std::make_unique<OpSpec>();
  spec->schema = schema;
  spec->cache_index = -1;
  spec->check_shapes = nullptr;
  spec->check_form = check_by_rules;
  derive_spec(spec.get());
  return spec;
}

}  // namespace dlfuse
