// Calls an op's schema makes invalid, derived from one valid call: too few or too many
// tensors, a required tensor NULL, another dtype, too many dims, a shape against the rule,
// outputs overlapping, attributes of the wrong type or out of range. Each must be refused
// with INVALID_ARGUMENT and a message, and leave every output as it was.
#ifndef DLFUSE_CONFORMANCE_SCHEMA_BAD_H_
#define DLFUSE_CONFORMANCE_SCHEMA_BAD_H_

#include <vector>

#include "schema_call.h"
#include "schema_checks.h"

namespace dlfuse_conformance {

std::vector<SchemaRow> bad_schema_calls(dlfuse_registry_t reg, DLDevice dev, const SchemaOp& op,
                                        const SchemaArgs& valid);

}  // namespace dlfuse_conformance

#endif
