// dlfuse_op_backward_plan (ABI 1.2): what a binding keeps from a call for its backward, so
// that every binding's autograd follows the op's rules instead of knowing the op.
#include <cstring>

#include "error.hpp"
#include "registry.hpp"

using namespace dlfuse;

namespace {

// "<op>_backward"'s handle, looked up once per op.
dlfuse_status_t backward_of(dlfuse_op* op, dlfuse_op** backward) {
  if ((*backward = op->backward.load(std::memory_order_acquire))) return DLFUSE_STATUS_OK;
  const std::string name = op->name + "_backward";
  dlfuse_registry* r = op->registry;
  std::lock_guard<std::mutex> lock(r->mutex);
  if (!offered_locked(r, name))
    return fail(DLFUSE_STATUS_NOT_FOUND, "dlfuse_op_backward_plan: %s: no available plugin offers its backward '%s'",
                op->name.c_str(), name.c_str());
  *backward = op_handle_locked(r, name);
  op->backward.store(*backward, std::memory_order_release);
  return DLFUSE_STATUS_OK;
}

int32_t find(const dlfuse_arg_schema_t* args, int32_t n, const char* name) {
  for (int32_t i = 0; i < n; ++i)
    if (std::strcmp(args[i].name, name) == 0) return i;
  return -1;
}

// Every backward input (grad_out aside) named like an input or output of the forward.
uint32_t by_name(const dlfuse_op_schema_t& fwd, const dlfuse_op_schema_t& bwd) {
  uint32_t mask = 1u;
  for (int32_t i = 1; i < bwd.num_inputs; ++i)
    if (find(fwd.inputs, fwd.num_inputs, bwd.inputs[i].name) >= 0 ||
        find(fwd.outputs, fwd.num_outputs, bwd.inputs[i].name) >= 0)
      mask |= 1u << i;
  return mask;
}

// The forward's required outputs and those the chosen backward inputs name.
uint32_t outputs_written(const dlfuse_op_schema_t& fwd, const dlfuse_op_schema_t& bwd, uint32_t inputs) {
  uint32_t mask = 0;
  for (int32_t k = 0; k < fwd.num_outputs; ++k) {
    const int32_t i = find(bwd.inputs, bwd.num_inputs, fwd.outputs[k].name);
    if (!(fwd.outputs[k].flags & DLFUSE_ARG_OPTIONAL) || (i >= 0 && (inputs >> i & 1u))) mask |= 1u << k;
  }
  return mask;
}

}  // namespace

extern "C" {

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_backward_plan(dlfuse_op_t op, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                                      int32_t device_type, DLDataType dtype, dlfuse_op_t* backward,
                                                      uint32_t* backward_inputs, uint32_t* forward_outputs) {
  return guarded("dlfuse_op_backward_plan", [&] {
    if (!op)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_backward_plan: argument 'op' is NULL; expected a handle from dlfuse_op_get");
    if (!backward || !backward_inputs || !forward_outputs)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_backward_plan: argument '%s' is NULL; expected a pointer "
                  "to receive it",
                  !backward          ? "backward"
                  : !backward_inputs ? "backward_inputs"
                                     : "forward_outputs");
    const OpSpec* spec = spec_of(op);
    if (!spec)
      return fail(DLFUSE_STATUS_NOT_FOUND,
                  "dlfuse_op_backward_plan: op '%s' has no schema; expected a core op or a "
                  "declared one",
                  op->name.c_str());
    dlfuse_op* bwd = nullptr;
    if (auto s = backward_of(op, &bwd)) return s;
    const OpSpec* bspec = spec_of(bwd);
    if (!bspec)
      return fail(DLFUSE_STATUS_NOT_FOUND,
                  "dlfuse_op_backward_plan: %s: its backward '%s' has no schema; expected a "
                  "core op or a declared one",
                  op->name.c_str(), bwd->name.c_str());
    dlfuse_attr_t canonical[kMaxAttrs];
    if (auto s = canonical_attrs(*spec, attrs, num_attrs, canonical)) return s;
    const uint32_t in = spec->save_rule
                            ? spec->save_rule(canonical, serving_kernel_takes_newer_inputs(bwd, device_type, dtype))
                            : by_name(*spec->schema, *bspec->schema);
    *backward = bwd;
    *backward_inputs = in;
    *forward_outputs = outputs_written(*spec->schema, *bspec->schema, in);
    return DLFUSE_STATUS_OK;
  });
}

}  // extern "C"
