// The conformance cases of each kernel (valid calls) and the bad calls each must refuse.
#ifndef DLFUSE_CONFORMANCE_CASES_H_
#define DLFUSE_CONFORMANCE_CASES_H_

#include <dlfuse/dlfuse.h>

#include <string>
#include <vector>

#include "op_case.h"

namespace dlfuse_conformance {

std::vector<CaseSpec> cases_for(OpKind op);

struct BadOutcome {
  std::string name;
  bool pass;           // the call was refused with a message
  std::string detail;  // the status and message, or what went wrong
};
// Runs every bad call of `op` on `dev` with tensors of `dtype`; each must be refused.
std::vector<BadOutcome> run_bad_inputs(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype, OpKind op);

}  // namespace dlfuse_conformance

#endif
