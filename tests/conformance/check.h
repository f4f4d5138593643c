// Comparing what a kernel wrote with the float64 reference (docs/ops.md, "Tolerances").
#ifndef DLFUSE_CONFORMANCE_CHECK_H_
#define DLFUSE_CONFORMANCE_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dtypes.h"
#include "host_tensor.h"
#include "reference.h"

namespace dlfuse_conformance {

struct CheckStats {
  int64_t checked = 0, bad = 0;
  double max_abs = 0.0;    // over finite elements
  double max_ratio = 0.0;  // |got - ref| / bound; > 1 fails
  std::string first_bad;   // a description of the first failing element
  void fail(const std::string& what);
};

// Every logical element of `got` against `ref`: NaN exactly where the reference is NaN,
// Inf exactly equal, otherwise |got - ref| <= atol + rtol * scale.
void check_values(const std::string& name, const HostTensor& got, const RefOut& ref, Tolerance tol, CheckStats* stats);

// Slots of the buffer that no element of the view maps to must still hold what was
// uploaded (`before`): a kernel that writes past its view fails here.
void check_outside_view(const std::string& name, const HostTensor& got, const HostTensor& before, CheckStats* stats);

// An input's whole buffer must come back unchanged.
void check_unchanged(const std::string& name, const HostTensor& got, const HostTensor& before, CheckStats* stats);

std::string format_index(const std::vector<int64_t>& shape, int64_t linear);

}  // namespace dlfuse_conformance

#endif
