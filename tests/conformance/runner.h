// The conformance runner: loads one plugin file into a registry of its own and checks every
// (kernel, declared dtype, device) against the float64 reference, plus the bad calls.
#ifndef DLFUSE_CONFORMANCE_RUNNER_H_
#define DLFUSE_CONFORMANCE_RUNNER_H_

#include <cstdint>
#include <ostream>
#include <set>
#include <string>

namespace dlfuse_conformance {

constexpr uint64_t kDefaultSeed = 20250101;
constexpr int kDefaultRepeats = 3;
constexpr int kDefaultSweep = 24;
constexpr int kDefaultThreads = 4;

struct ConformOptions {
  std::string dtype;             // "" = every declared dtype; else f32, bf16, ...
  std::string op;                // "" = every op; else an op name
  std::string case_filter;       // "" = every case; else only cases whose name contains it
  std::string case_exclude;      // "" = none; else not the cases whose name contains any item (a,b,...)
  int device_id = -1;            // -1 = every device
  uint64_t seed = kDefaultSeed;  // the sweep's cases and every case's data
  bool verbose = false;          // details for passing rows too
  bool bad_inputs = true;
  bool large = false;  // also the cases of 2^26 elements or more (CaseSpec::large)
  bool grid = false;   // also the grid of unaligned GEMM shapes (CaseSpec::grid)
  // A plugin file whose float64 CPU kernels are the reference for the ops it serves that
  // the suite has no reference of its own for (a plugin's declared ops); "" for none.
  std::string reference;
  // Also run the checks derived from schemas (schema_checks.h) on the core ops, beside
  // their float64 reference (the declared ops always get them).
  bool schema_checks = false;
  // Runs of every valid case, each after poisoning stale device memory (stale.h); runs
  // after the first must be bit-identical to it unless the op is in `nondeterministic`.
  int repeats = kDefaultRepeats;
  bool stale = true;              // poison stale memory before each run
  int sweep = kDefaultSweep;      // generated cases per kernel and dtype (sweep.h)
  int threads = kDefaultThreads;  // threads of the concurrency stage; < 2 skips it
  // Ops whose kernels may differ from run to run (the plugin author says so): their runs
  // are checked against the reference only. "all" for every op.
  std::set<std::string> nondeterministic;
};

struct ConformSummary {
  int passed = 0, failed = 0;
};

// Writes the table and a final "N passed, N failed" line to `out`.
ConformSummary run_conformance(const std::string& plugin_path, const ConformOptions& opts, std::ostream& out);

}  // namespace dlfuse_conformance

#endif
