// Conformance for an op the suite has no float64 reference for (a plugin's own op): every
// check derived from its schema (docs/plugin-guide.md, section 7, "Ops of your own").
//  - the backward (`<op>_backward`) against the forward by central differences, in float64
//    where the plugin serves it, else float32 (schema_grad.h);
//  - each dtype against the plugin's own float64 kernel (else float32, for float16 and
//    bfloat16) and against a reference plugin's float64 CPU kernel when one is given;
//  - layouts (strided, transposed, byte offset, zero stride), broadcasts against materialized
//    inputs, in place where the schema allows it, optional outputs absent, REDUCIBLE outputs
//    against the sum of the full-shape result;
//  - every run repeated on poisoned stale memory and from several threads, bit-identical;
//  - calls the schema makes invalid refused, outputs untouched (schema_bad.h).
#ifndef DLFUSE_CONFORMANCE_SCHEMA_CHECKS_H_
#define DLFUSE_CONFORMANCE_SCHEMA_CHECKS_H_

#include <dlfuse/dlfuse.h>

#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "schema_call.h"

namespace dlfuse_conformance {

struct SchemaRow {
  bool pass = false;
  std::string name;
  double max_abs = -1.0, max_ratio = -1.0;  // < 0: not a value check
  std::string detail;
};

struct SchemaCheckOptions {
  uint64_t seed = 0;
  int repeats = 3;
  bool stale = true;
  int threads = 4;
  bool exact = true;  // runs must be bit-identical (the op is not declared nondeterministic)
  bool bad_inputs = true;
  int draws = 3;                          // random problems per kernel and dtype: defaults first, then drawn attributes
  dlfuse_registry_t reference = nullptr;  // a registry whose float64 CPU kernels are the reference
  std::function<bool(const std::string&)> wanted;  // which case names run (null: all)
};

// The rows for one (kernel of `op`, dtype, device) of the plugin in `reg`.
std::vector<SchemaRow> check_schema_kernel(dlfuse_registry_t reg, const std::string& op, DLDataType dt, DLDevice dev,
                                           const SchemaCheckOptions& opts);

// ---- shared by the schema checks ----------------------------------------------------------

// A tensor of `shape` in `dt` and `layout` (offset elements before it), every logical
// element uniform in [-1, 1); or the poison everywhere (outputs).
HostTensor random_tensor(DLDataType dt, const std::vector<int64_t>& shape, std::mt19937_64& rng,
                         Layout layout = Layout::kCompact, int64_t offset = 0);
HostTensor poisoned_tensor(DLDataType dt, const std::vector<int64_t>& shape, Layout layout = Layout::kCompact,
                           int64_t offset = 0);
// The same logical values in `dt`, compact (an output: poisoned).
HostTensor converted(const HostTensor& t, DLDataType dt, bool output);
SchemaArgs converted(const SchemaArgs& a, DLDataType dt);

// Norm-wise tolerance of a black-box op: |got - ref| <= atol + rtol (|ref| + max |ref|), the
// max over the output, scaled by `factor`; NaN where NaN, Inf equal.
void compare_normwise(const std::string& name, const HostTensor& got, const std::vector<double>& ref, DLDataType dt,
                      double factor, CheckStats* stats);

}  // namespace dlfuse_conformance

#endif
