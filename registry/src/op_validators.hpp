// Validation of a call before dispatch: the ops named in types.h fully, any other op
// generically (tensors, one device, one dtype, no output overlapping anything).
#pragma once
#include <cstdint>

#include "dlfuse/types.h"

namespace dlfuse {

constexpr int32_t kMaxArgs = 16;  // inputs or outputs of one call
constexpr int32_t kMaxAttrs = 4;  // attributes of a known op

struct OpSpec;  // one of the known ops

// What a valid call resolved to.
struct CallPlan {
  DLDevice device{};
  DLDataType dtype{};
  bool skip = false;  // every present output is empty: nothing to run
  const dlfuse_attr_t* attrs = nullptr;  // what the kernel receives
  int32_t num_attrs = 0;
  dlfuse_attr_t canonical[kMaxAttrs];  // storage for a known op's complete attribute list
};

// NULL for ops the registry does not know.
const OpSpec* find_known_op(const char* name);
// A known op's inputs now, the inputs of the ABI minor that added it (a caller or plugin of
// that minor passes or reads only those), and that minor.
int32_t op_num_inputs(const OpSpec* spec);
int32_t op_min_inputs(const OpSpec* spec);
uint32_t op_since_minor(const OpSpec* spec);
const char* op_input_name(const OpSpec* spec, int32_t i);

// Validates everything about a call that does not depend on the chosen plugin.
dlfuse_status_t validate_call(const OpSpec* spec, const char* op_name,
                              const DLTensor* const* inputs, int32_t num_inputs,
                              DLTensor* const* outputs, int32_t num_outputs,
                              const dlfuse_attr_t* attrs, int32_t num_attrs, CallPlan* plan);

}  // namespace dlfuse
