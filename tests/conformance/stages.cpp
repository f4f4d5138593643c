#include "stages.h"

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace dlfuse_conformance {
namespace {

struct Job {
  std::unique_ptr<PreparedCall> call;
  PreparedCall::Readback expected;
};

// Runs the call once and checks it; "" on success, else why not.
std::string run_alone(Job& j) {
  std::string err;
  dlfuse_status_t st = j.call->invoke();
  if (st != DLFUSE_STATUS_OK) return "call failed: " + describe_failure(st);
  if (!j.call->download(&j.expected, &err)) return "readback: " + err;
  CheckStats stats;
  j.call->check(j.expected, &stats);
  if (stats.bad) return std::to_string(stats.bad) + " elements bad; first: " + stats.first_bad;
  return "";
}

}  // namespace

StageResult run_threads_stage(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype, const std::vector<CaseSpec>& cases,
                              uint64_t seed, int threads, int iterations) {
  StageResult r;
  std::vector<std::vector<Job>> jobs(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    for (const CaseSpec& spec : cases) {
      Job j;
      j.call = std::make_unique<PreparedCall>(reg, dev, dtype);
      std::string err;
      if (!j.call->prepare(spec, seed + 7919 * uint64_t(t + 1), &err)) {
        r.detail = "setup of " + spec.name + ": " + err;
        return r;
      }
      const std::string why = run_alone(j);
      if (!why.empty()) {
        r.detail = spec.name + " with thread " + std::to_string(t) + "'s data, run alone: " + why;
        return r;
      }
      jobs[size_t(t)].push_back(std::move(j));
    }

  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::string first_failure;
  auto report = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(m);
    if (first_failure.empty()) first_failure = what;
  };
  auto worker = [&](int t) {
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return go; });
    }
    std::vector<Job>& mine = jobs[size_t(t)];
    const size_t n = mine.size();
    for (int it = 0; it < iterations; ++it)
      for (size_t k = 0; k < n; ++k) {
        Job& j = mine[(k + size_t(t)) % n];
        const std::string where =
            j.call->spec().name + " (thread " + std::to_string(t) + ", iteration " + std::to_string(it + 1) + ")";
        std::string err;
        if (!j.call->reset(&err)) return report(where + ": setup: " + err);
        const dlfuse_status_t st = j.call->invoke();
        if (st != DLFUSE_STATUS_OK) return report(where + ": call failed: " + describe_failure(st));
        PreparedCall::Readback got;
        if (!j.call->download(&got, &err)) return report(where + ": readback: " + err);
        const std::string diff = first_difference(got, j.expected);
        if (!diff.empty())
          return report(where + ": differs from the same call run alone: " + diff + " (concurrent vs alone)");
      }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  {
    std::lock_guard<std::mutex> lock(m);
    go = true;
  }
  cv.notify_all();
  for (std::thread& th : pool) th.join();
  r.pass = first_failure.empty();
  r.detail = r.pass ? std::to_string(threads) + " threads x " + std::to_string(cases.size()) + " cases x " +
                          std::to_string(iterations) + " iterations, bit-identical to single-threaded runs"
                    : first_failure;
  return r;
}

StageResult run_cpu_stream_stage(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype,
                                 const std::vector<CaseSpec>& cases, uint64_t seed, bool exact) {
  StageResult r;
  // Not a stream of any runtime: a kernel that dereferences or writes it is caught here.
  alignas(64) unsigned char token[256];
  std::memset(token, 0xA5, sizeof token);
  unsigned char before[sizeof token];
  std::memcpy(before, token, sizeof token);
  for (const CaseSpec& spec : cases) {
    Job j;
    j.call = std::make_unique<PreparedCall>(reg, dev, dtype);
    std::string err;
    if (!j.call->prepare(spec, seed, &err)) {
      r.detail = "setup of " + spec.name + ": " + err;
      return r;
    }
    const std::string why = run_alone(j);
    if (!why.empty()) {
      r.detail = spec.name + " with a NULL stream: " + why;
      return r;
    }
    if (!j.call->reset(&err)) {
      r.detail = spec.name + ": setup: " + err;
      return r;
    }
    const dlfuse_status_t st = j.call->invoke(token);
    if (st != DLFUSE_STATUS_OK) {
      r.detail = spec.name + " with a non-NULL stream: refused (" + describe_failure(st) +
                 "); a CPU kernel must ignore the stream";
      return r;
    }
    PreparedCall::Readback got;
    if (!j.call->download(&got, &err, false)) {
      r.detail = spec.name + ": readback: " + err;
      return r;
    }
    std::string diff = exact ? first_difference(got, j.expected) : "";
    if (!exact) {
      CheckStats stats;
      j.call->check(got, &stats);
      if (stats.bad) diff = stats.first_bad;
    }
    if (!diff.empty()) {
      r.detail = spec.name + " with a non-NULL stream, read back without synchronizing: " + diff +
                 (exact ? " (vs the NULL-stream call)" : "");
      return r;
    }
    if (std::memcmp(token, before, sizeof token) != 0) {
      r.detail = spec.name + ": the kernel wrote to the memory its stream argument points at";
      return r;
    }
  }
  r.pass = true;
  r.detail = std::to_string(cases.size()) + " cases: non-NULL stream ignored, outputs complete on return";
  return r;
}

}  // namespace dlfuse_conformance
