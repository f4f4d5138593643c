// The conformance cases of each kernel (valid calls) and the bad calls each must refuse.
#ifndef DLFUSE_CONFORMANCE_CASES_H_
#define DLFUSE_CONFORMANCE_CASES_H_

#include <dlfuse/dlfuse.h>

#include <string>
#include <vector>

#include "op_case.h"

namespace dlfuse_conformance {

// add_mul_activation_backward's cases include the out form (from_out) and the five-input
// call (v11_inputs): the runner drops them for a kernel without DLFUSE_KERNEL_TAKES_V1_1_INPUTS.
std::vector<CaseSpec> cases_for(OpKind op);

struct BadOutcome {
  std::string name;
  bool pass;           // the call was refused with a message
  std::string detail;  // the status and message, or what went wrong
};
// Runs every bad call of `op` on `dev` with tensors of `dtype`; each must be refused.
// `v11_inputs`: the kernel takes ABI 1.1's appended inputs (the bad calls that misuse them
// are run for every kernel: the registry refuses them before choosing one).
std::vector<BadOutcome> run_bad_inputs(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype, OpKind op,
                                       bool v11_inputs);

}  // namespace dlfuse_conformance

#endif
