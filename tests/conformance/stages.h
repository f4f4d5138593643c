// Stages that run a kernel in other ways than one call at a time on the default stream:
// from several threads at once, and (CPU plugins) with a stream that is not NULL.
#ifndef DLFUSE_CONFORMANCE_STAGES_H_
#define DLFUSE_CONFORMANCE_STAGES_H_

#include <dlfuse/dlfuse.h>

#include <string>
#include <vector>

#include "op_case.h"

namespace dlfuse_conformance {

struct StageResult {
  bool pass = false;
  std::string detail;
};

// Every thread gets its own data for each case (distinct seeds) and its own buffers. Each
// call is first run alone to record its bytes, checked against the reference; then all
// threads start at once and run all their calls `iterations` times (each thread starting at
// another case, so different ops and shapes overlap), on the default stream (the registry
// cannot create streams), every result required bit-identical to the call run alone.
StageResult run_threads_stage(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype, const std::vector<CaseSpec>& cases,
                              uint64_t seed, int threads, int iterations);

// CPU plugins run synchronously and ignore the stream (docs/plugin-guide.md, "Streams on
// the CPU"): each case is called with NULL, then with a non-NULL value that is not a
// stream of any runtime; the second call's outputs, read back without synchronizing,
// must be bit-identical to the first's (`exact` false: within the tolerance of the
// reference), and the memory it points at untouched.
StageResult run_cpu_stream_stage(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype,
                                 const std::vector<CaseSpec>& cases, uint64_t seed, bool exact);

}  // namespace dlfuse_conformance

#endif
