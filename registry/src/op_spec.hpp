// What validation knows of an op with a schema: the schema, facts derived from it once, and
// the op's own rules.
#pragma once
#include <cstdint>

#include "op_validators.hpp"
#include "tensor_checks.hpp"

namespace dlfuse {

// Shapes of the present outputs (in and out have the schema's counts; absent ones t == NULL).
using ShapeCheck = dlfuse_status_t (*)(const char* op, const TensorView* in, const TensorView* out);
// Rules that tie which optional arguments are present to the attributes, or (declared ops)
// the output shapes their rules give from the attributes; after the shape and attribute
// checks passed.
using FormCheck = dlfuse_status_t (*)(const OpSpec& spec, const char* op, const TensorView* in, const TensorView* out,
                                      const dlfuse_attr_t* canonical);

// Which inputs of the op's backward a binding passes from a call with these canonical
// attributes (bit i: backward input i), where the op's rules let it keep fewer tensors than
// every one of the same name; `takes_newer_inputs`: the kernel serving the backward takes
// inputs appended after the backward's minor. NULL: every input named like a tensor of the
// call (backward_plan.cpp).
using SaveRule = uint32_t (*)(const dlfuse_attr_t* canonical, bool takes_newer_inputs);

struct OpSpec {
  const dlfuse_op_schema_t* schema;
  int32_t cache_index;        // its slot in the layout cache (core ops); -1: full checks each call
  int32_t min_inputs;         // a caller of an older minor may pass only the first min_inputs
  uint32_t optional_inputs;   // bit i: inputs[i] may be NULL (the op's rules say when)
  uint32_t optional_outputs;  // bit i: outputs[i] may be NULL
  const char* input_names[kMaxArgs];
  const char* output_names[kMaxArgs];
  ShapeCheck check_shapes;  // may be NULL
  FormCheck check_form;     // may be NULL
  SaveRule save_rule;       // may be NULL
};

// Fills the derived fields of `spec` from spec->schema.
void derive_spec(OpSpec* spec);

// Fills `canonical` with every attribute of the op, in schema order, defaults filled.
dlfuse_status_t canonical_attrs(const OpSpec& spec, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                dlfuse_attr_t* canonical);

// Output `i`'s shape by its schema rule from the inputs (NULL where absent) and the
// canonical attributes; shape has DLFUSE_MAX_NDIM entries.
dlfuse_status_t rule_shape(const OpSpec& spec, const char* op, const DLTensor* const* inputs,
                           const dlfuse_attr_t* canonical, int32_t i, int64_t* shape, int32_t* ndim);

}  // namespace dlfuse
