// Ops that plugins declare (ABI 1.2, dlfuse_kernel_t.schema).
#pragma once
#include <memory>

#include "registry.hpp"

namespace dlfuse {

// A registry-owned copy of a declared schema (which passed check_declared_schema), with
// its validation spec. Its inputs are marked as of ABI 1.2, the minor that declares ops.
std::unique_ptr<DeclaredOp> copy_declared(const dlfuse_op_schema_t& schema);
// Whether two plugins declared the same op alike (a shape callback counts as present or not).
bool same_schema(const dlfuse_op_schema_t& a, const dlfuse_op_schema_t& b);

}  // namespace dlfuse
