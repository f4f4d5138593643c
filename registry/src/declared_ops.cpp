// Ops that plugins declare (ABI 1.2): their schemas copied, compared and published.
#include "declared_ops.hpp"

#include <cstring>

namespace dlfuse {
namespace {

bool same_args(const dlfuse_arg_schema_t* a, const dlfuse_arg_schema_t* b, int32_t n) {
  for (int32_t i = 0; i < n; ++i)
    if (std::strcmp(a[i].name, b[i].name) != 0 || a[i].flags != b[i].flags || a[i].since_minor != b[i].since_minor ||
        a[i].shape_rule != b[i].shape_rule || a[i].shape_inputs != b[i].shape_inputs ||
        a[i].alias_input != b[i].alias_input)
      return false;
  return true;
}

bool same_attr_value(const dlfuse_attr_t& a, const dlfuse_attr_t& b) {
  if (a.key != b.key || a.type != b.type) return false;
  return a.type == DLFUSE_ATTR_FLOAT64 ? std::memcmp(&a.value.f64, &b.value.f64, sizeof(double)) == 0
                                       : a.value.i64 == b.value.i64;
}

}  // namespace

std::unique_ptr<DeclaredOp> copy_declared(const dlfuse_op_schema_t& s) {
  auto d = std::make_unique<DeclaredOp>();
  d->names.reserve(size_t(1 + s.num_inputs + s.num_outputs + s.num_attrs));  // no reallocation: pointers stay
  const auto keep = [&](const char* name) { return d->names.emplace_back(name).c_str(); };
  d->schema.struct_size = sizeof d->schema;
  d->schema.name = keep(s.name);
  d->schema.since_minor = 2;  // the ABI minor that lets plugins declare ops
  d->inputs.assign(s.inputs, s.inputs + s.num_inputs);
  d->outputs.assign(s.outputs, s.outputs + s.num_outputs);
  d->attrs.assign(s.attrs, s.attrs + s.num_attrs);
  for (auto& a : d->inputs) {
    a.name = keep(a.name);
    a.since_minor = 2;
    a.shape_rule = 0;
    a.shape_inputs = 0;
    a.alias_input = -1;
  }
  for (auto& a : d->outputs) {
    a.name = keep(a.name);
    a.since_minor = 0;
  }
  for (auto& a : d->attrs) a.name = keep(a.name);
  d->schema.num_inputs = s.num_inputs;
  d->schema.inputs = d->inputs.data();
  d->schema.num_outputs = s.num_outputs;
  d->schema.outputs = d->outputs.data();
  d->schema.num_attrs = s.num_attrs;
  d->schema.attrs = d->attrs.data();
  d->schema.shape_fn = s.shape_fn;
  d->schema.plugin = -1;
  d->spec = make_declared_spec(&d->schema);
  return d;
}

bool same_schema(const dlfuse_op_schema_t& a, const dlfuse_op_schema_t& b) {
  if (std::strcmp(a.name, b.name) != 0 || a.num_inputs != b.num_inputs || a.num_outputs != b.num_outputs ||
      a.num_attrs != b.num_attrs || !a.shape_fn != !b.shape_fn)
    return false;
  if (!same_args(a.inputs, b.inputs, a.num_inputs) || !same_args(a.outputs, b.outputs, a.num_outputs)) return false;
  for (int32_t i = 0; i < a.num_attrs; ++i) {
    const dlfuse_attr_schema_t &x = a.attrs[i], &y = b.attrs[i];
    if (std::strcmp(x.name, y.name) != 0 || x.flags != y.flags || !same_attr_value(x.default_value, y.default_value) ||
        x.min_value != y.min_value || x.max_value != y.max_value)
      return false;
  }
  return true;
}

}  // namespace dlfuse
