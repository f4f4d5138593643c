// Conformance of mlp and mlp_backward (ABI 1.2): fixed cases through dlfuse_op_call, each
// output against the float64 reference of its layer (docs/ops.md, "mlp").
//
// The forward's layers are checked one by one, each from the input the device gave it (x,
// or the previous layer's output as read back), so every layer's tolerance is a single
// matmul_add_activation's. The backward's layer-to-layer gradients stay inside the plugin;
// its data are therefore small integers (and halves, quarters for SIGMOID and TANH) whose
// every layer-to-layer value is exact in the dtype (each weight row and column holds at
// most two entries of +-1), so a correct plugin meets each output's single-op tolerance
// whatever it rounds in between.
#ifndef DLFUSE_CONFORMANCE_MLP_CASES_H_
#define DLFUSE_CONFORMANCE_MLP_CASES_H_

#include <dlfuse/dlfuse.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlfuse_conformance {

struct MlpOutcome {
  std::string name;
  bool pass = false;
  double max_abs = 0, max_ratio = 0;
  std::string detail;
};

// True for "mlp" and "mlp_backward", the ops these cases check.
bool is_mlp_op(const std::string& name);

// Every case of `op` ("mlp" or "mlp_backward") on one device and dtype; `filter` keeps the
// cases whose name contains it.
std::vector<MlpOutcome> run_mlp_cases(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const std::string& op,
                                      uint64_t seed, const std::string& filter);

}  // namespace dlfuse_conformance

#endif
