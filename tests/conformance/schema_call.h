// One call of an op described by its schema (dlfuse_op_schema_t), whatever the op: host
// tensors in, placed on the device through the plugin's own services, called through the
// registry, every buffer read back. The checks of ops without a float64 reference
// (schema_checks.h) are built on it.
#ifndef DLFUSE_CONFORMANCE_SCHEMA_CALL_H_
#define DLFUSE_CONFORMANCE_SCHEMA_CALL_H_

#include <dlfuse/dlfuse.h>

#include <optional>
#include <string>
#include <vector>

#include "host_tensor.h"

namespace dlfuse_conformance {

// A looked-up op and its schema (every pointer in it lives as long as the registry).
struct SchemaOp {
  std::string name;
  dlfuse_op_t handle = nullptr;
  dlfuse_op_schema_t schema{};
  // False with *err when the registry does not know the op or it has no schema.
  static bool lookup(dlfuse_registry_t reg, const std::string& name, SchemaOp* op, std::string* err);
  int input(const std::string& name) const;   // -1 if none
  int output(const std::string& name) const;  // -1 if none
  int num_inputs() const { return schema.num_inputs; }
  int num_outputs() const { return schema.num_outputs; }
};

// One call's host tensors: an absent entry is passed as NULL. An output with alias[i] >= 0
// is passed as exactly the view of input alias[i] (in place); alias[i] = -2 - k, as the view
// of an earlier output k (overlapping outputs, which a call must be refused for).
struct SchemaArgs {
  std::vector<std::optional<HostTensor>> in, out;
  std::vector<int> alias;
  std::vector<dlfuse_attr_t> attrs;
};

struct SchemaResult {
  dlfuse_status_t status = DLFUSE_STATUS_OK;
  std::string message;                         // the registry's message, or what failed around the call
  bool ran = false;                            // false: setup or readback failed (message says what)
  std::vector<std::optional<HostTensor>> out;  // every output's buffer after the call
  std::vector<std::optional<HostTensor>> in;   // every input's buffer after the call
};

// Runs the call on `dev`. `stale_run` >= 0 poisons stale device memory first with the
// pattern of that run (stale.h). Device buffers live for the call only. With `times`, the
// call then runs `timed` more times, each synchronized, and *times receives each one's
// microseconds (the outputs read back are the first call's only when the op is deterministic).
SchemaResult run_schema_call(dlfuse_registry_t reg, DLDevice dev, const SchemaOp& op, const SchemaArgs& args,
                             int stale_run = -1, int timed = 0, std::vector<double>* times = nullptr);

// The output shapes the registry infers for these input shapes and attributes (absent
// inputs: nullopt). False with *err (the registry's message) when it refuses them.
bool infer_output_shapes(const SchemaOp& op, DLDataType dt, const std::vector<std::optional<std::vector<int64_t>>>& in,
                         const std::vector<dlfuse_attr_t>& attrs, std::vector<std::vector<int64_t>>* out,
                         std::string* err);

std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace dlfuse_conformance

#endif
