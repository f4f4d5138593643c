// The timing method and the row format that bench/run.py reads, shared by the driver
// (dlfuse_bench) and the peer programs in bench/peers/, so that their rows compare like
// for like. Header-only: each program is one translation unit.
//
// A case: one warm-up call, then `rounds` batches of `batch` back-to-back calls (about 20 ms
// each, kBatchSeconds), each batch closed by a device synchronize and timed by the host's
// steady clock; the per-call time of a batch is its time / batch. Medians and the 10th/90th percentiles are over the
// batches. Batches keep small GPU calls from being timed as launch + sync latency (like CUDA events around back-to-back
// calls); a CPU call returns when done, so a batch of a slow CPU case is one call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace bench {

enum class Mode { smoke, quick, full };
inline Mode g_mode = Mode::full;

inline bool parse_mode(const std::string& m) {
  if (m == "smoke")
    g_mode = Mode::smoke;
  else if (m == "quick")
    g_mode = Mode::quick;
  else if (m == "full")
    g_mode = Mode::full;
  else
    return false;
  return true;
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stats {
  double median, p10, p90, min;
  int n;
};

inline Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double f) {  // linear interpolation between order statistics
    const double pos = f * double(v.size() - 1);
    const size_t lo = size_t(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  return {q(0.5), q(0.1), q(0.9), v.front(), int(v.size())};
}

// A batch's target length. Each batch pays the host's latency to its first launch and the
// synchronize once; with 2 ms batches, 2-3 calls of a 0.7 ms problem carried it. On an H100
// the 1 GiB copy ceiling read 2918-2983 GB/s through 2 ms batches and 3013 GB/s through 20 ms
// ones (cudaMemcpy timed with events: 3006).
constexpr double kBatchSeconds = 0.020;

// call(i) enqueues repetition i; sync() waits for the device.
inline Stats time_calls(const std::function<void(int)>& call, const std::function<void()>& sync, int* batch_out) {
  call(0);  // warm-up (first-call costs: compilation, plans, workspaces)
  sync();
  double t0 = now_s();
  call(1);
  sync();
  double one = now_s() - t0;
  if (g_mode != Mode::smoke && one < 0.05) {  // a second warm-up for the fast cases
    call(2);
    sync();
    t0 = now_s();
    call(3);
    sync();
    one = std::min(one, now_s() - t0);
  }
  const double seconds = g_mode == Mode::smoke ? 0.0 : g_mode == Mode::quick ? 0.3 : 2.0;
  const int min_r = g_mode == Mode::smoke ? 3 : g_mode == Mode::quick ? 3 : 7;
  const int max_r = g_mode == Mode::smoke ? 3 : g_mode == Mode::quick ? 30 : 300;
  // Batches of about kBatchSeconds (at most 100 calls); slow calls run one per batch.
  const int batch = g_mode == Mode::smoke ? 1 : int(std::clamp(kBatchSeconds / std::max(one, 1e-7), 1.0, 100.0));
  // Calls slower than half a second (CPU backward at 16384x8192 on 2 cores) get 3 rounds.
  const int min_rounds = one > 0.5 ? std::min(3, min_r) : min_r;
  const int rounds = int(std::clamp(seconds / std::max(one * batch, 1e-7), double(min_rounds), double(max_r)));
  std::vector<double> per_call;
  int rep = 0;
  for (int r = 0; r < rounds; ++r) {
    t0 = now_s();
    for (int i = 0; i < batch; ++i) call(rep++);
    sync();
    per_call.push_back((now_s() - t0) / batch);
  }
  *batch_out = batch;
  return stats_of(per_call);
}

// Enough input sets to exceed 2x a 64 MiB last-level cache, at most 8 and 1 GiB in all.
inline int sets_for(size_t set_bytes) {
  const size_t want = (size_t(128) << 20) / std::max<size_t>(set_bytes, 1) + 1;
  const size_t cap = std::max<size_t>(1, (size_t(1) << 30) / std::max<size_t>(set_bytes, 1));
  return int(std::clamp<size_t>(want, 1, std::min<size_t>(8, cap)));
}

// One result row (a JSON line on stdout) and its progress line on stderr. `extra` is
// appended to the object: ", \"key\": value, ...".
inline void row(const std::string& op, const std::string& dir, const std::string& dtype, const std::string& shape,
                const std::string& impl, const std::string& device, const Stats& s, int batch,
                const std::string& extra = "") {
  std::printf(
      "{\"op\": \"%s\", \"dir\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", "
      "\"device\": \"%s\", \"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, \"min_ms\": %.6g, "
      "\"rounds\": %d, \"batch\": %d%s}\n",
      op.c_str(), dir.c_str(), dtype.c_str(), shape.c_str(), impl.c_str(), device.c_str(), s.median * 1e3, s.p10 * 1e3,
      s.p90 * 1e3, s.min * 1e3, s.n, batch, extra.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "  %-64s median %10.4f ms  [p10 %.4f, p90 %.4f] x%d\n",
               (impl + " " + op + " " + dir + " " + dtype + " " + shape).c_str(), s.median * 1e3, s.p10 * 1e3,
               s.p90 * 1e3, s.n);
}

// "2048x512x256,16384x8192" -> {{2048, 512, 256}, {16384, 8192}}; exits on a malformed list.
inline std::vector<std::vector<int64_t>> parse_shapes(const std::string& list) {
  std::vector<std::vector<int64_t>> out;
  size_t p = 0;
  while (p <= list.size()) {
    const size_t q = std::min(list.find(',', p), list.size());
    std::vector<int64_t> dims;
    const std::string item = list.substr(p, q - p);
    for (size_t a = 0; a < item.size();) {
      const size_t b = std::min(item.find('x', a), item.size());
      char* end = nullptr;
      const long long v = std::strtoll(item.c_str() + a, &end, 10);
      if (b == a || end != item.c_str() + b || v <= 0 || item.back() == 'x') {
        std::fprintf(stderr, "bad shape '%s': expected MxKxN or MxN with positive sizes\n", item.c_str());
        std::exit(2);
      }
      dims.push_back(v);
      a = b + 1;
    }
    if (!dims.empty()) out.push_back(dims);
    p = q + 1;
  }
  return out;
}

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

inline std::string dims_str(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t e : d) s += (s.empty() ? "" : "x") + std::to_string(e);
  return s;
}

}  // namespace bench
