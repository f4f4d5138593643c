// Validation of a call before dispatch, by the op's schema: the core ops' (dlfuse/ops.def,
// with their own cross-argument rules), the ops plugins declare, and any other op
// generically (tensors, one device, one dtype, no output overlapping anything).
#pragma once
#include <cstdint>
#include <memory>

#include "dlfuse/types.h"
#include "tensor_checks.hpp"

namespace dlfuse {

constexpr int32_t kMaxArgs = DLFUSE_MAX_ARGS;    // inputs or outputs of one call
constexpr int32_t kMaxAttrs = DLFUSE_MAX_ATTRS;  // attributes of an op with a schema
static_assert(DLFUSE_MAX_NDIM == kMaxNdim, "one dims limit");

struct OpSpec;  // an op with a schema

// What a valid call resolved to.
struct CallPlan {
  DLDevice device{};
  DLDataType dtype{};
  bool skip = false;                     // every present output is empty: nothing to run
  const dlfuse_attr_t* attrs = nullptr;  // what the kernel receives
  int32_t num_attrs = 0;
  dlfuse_attr_t canonical[kMaxAttrs];  // storage for a schema op's complete attribute list
};

// The core op of that name, or NULL.
const OpSpec* find_core_op(const char* name);
// Core op i (0 <= i < DLFUSE_NUM_CORE_OPS).
const OpSpec* core_op(int32_t i);
// The spec of an op a plugin declared; `schema` (owned by the caller, who keeps it alive)
// has passed check_declared_schema.
std::unique_ptr<OpSpec> make_declared_spec(const dlfuse_op_schema_t* schema);
// Empty when a plugin's declared schema is well formed, else what is wrong with it.
std::string check_declared_schema(const dlfuse_op_schema_t& schema);

const dlfuse_op_schema_t& op_schema(const OpSpec* spec);
// An op's inputs now, and the inputs of the ABI minor that added it (a caller or plugin of
// that minor passes or reads only those).
int32_t op_num_inputs(const OpSpec* spec);
int32_t op_min_inputs(const OpSpec* spec);
uint32_t op_since_minor(const OpSpec* spec);
const char* op_input_name(const OpSpec* spec, int32_t i);

// Validates everything about a call that does not depend on the chosen plugin.
dlfuse_status_t validate_call(const OpSpec* spec, const char* op_name, const DLTensor* const* inputs,
                              int32_t num_inputs, DLTensor* const* outputs, int32_t num_outputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, CallPlan* plan);

// The outputs' shapes and dtypes of a call from its inputs (ndim, shape and dtype read) and
// attributes, by the schema's rules. shapes is [num_outputs][DLFUSE_MAX_NDIM].
dlfuse_status_t infer_outputs(const OpSpec& spec, const DLTensor* const* inputs, int32_t num_inputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, int32_t* ndims, int64_t* shapes,
                              DLDataType* dtypes);

}  // namespace dlfuse
