// The conformance runner: loads one plugin file into a registry of its own and checks every
// (kernel, declared dtype, device) against the float64 reference, plus the bad calls.
#ifndef DLFUSE_CONFORMANCE_RUNNER_H_
#define DLFUSE_CONFORMANCE_RUNNER_H_

#include <cstdint>
#include <ostream>
#include <string>

namespace dlfuse_conformance {

struct ConformOptions {
  std::string dtype;        // "" = every declared dtype; else f32, bf16, ...
  std::string op;           // "" = every op; else an op name
  int device_id = -1;       // -1 = every device
  uint64_t seed = 20250101;
  bool verbose = false;     // details for passing rows too
  bool bad_inputs = true;
};

struct ConformSummary {
  int passed = 0, failed = 0;
};

// Writes the table and a final "N passed, N failed" line to `out`.
ConformSummary run_conformance(const std::string& plugin_path, const ConformOptions& opts,
                               std::ostream& out);

}  // namespace dlfuse_conformance

#endif
