#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace dlfuse_conformance {

void CheckStats::fail(const std::string& what) {
  if (bad++ == 0) first_bad = what;
}

std::string format_index(const std::vector<int64_t>& shape, int64_t linear) {
  std::vector<int64_t> idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = linear % shape[size_t(d)];
    linear /= shape[size_t(d)];
  }
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < idx.size(); ++i) s << (i ? "," : "") << idx[i];
  s << "]";
  return s.str();
}

void check_values(const std::string& name, const HostTensor& got, const RefOut& ref, Tolerance tol, CheckStats* stats) {
  const double poison = round_to(kPoison, got.dtype());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.get(i), r = ref.val[size_t(i)];
    ++stats->checked;
    auto why = [&](const std::string& tail) {
      std::ostringstream s;
      s.precision(9);
      s << name << format_index(got.shape(), i) << ": got " << g << ", expected " << r << tail;
      if (g == poison) s << " (still the poison value: never written)";
      return s.str();
    };
    if (std::isnan(r) || std::isnan(g)) {
      if (!(std::isnan(r) && std::isnan(g))) stats->fail(why(" (NaN mismatch)"));
      continue;
    }
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r) stats->fail(why(" (Inf mismatch)"));
      continue;
    }
    const double err = std::fabs(g - r), bound = tol.atol + tol.rtol * ref.scale[size_t(i)];
    stats->max_abs = std::max(stats->max_abs, err);
    stats->max_ratio = std::max(stats->max_ratio, err / bound);
    if (err > bound) {
      std::ostringstream tail;
      tail.precision(3);
      tail << ", |err| " << err << " > bound " << bound;
      stats->fail(why(tail.str()));
    }
  }
}

void check_outside_view(const std::string& name, const HostTensor& got, const HostTensor& before, CheckStats* stats) {
  const std::vector<bool> cov = got.covered();
  const size_t es = dtype_size(got.dtype());
  for (size_t s = 0; s < cov.size(); ++s) {
    if (cov[s] || std::memcmp(got.data() + s * es, before.data() + s * es, es) == 0) continue;
    stats->fail(name + ": wrote slot " + std::to_string(s) + " of its buffer, outside the view");
    return;
  }
}

void check_unchanged(const std::string& name, const HostTensor& got, const HostTensor& before, CheckStats* stats) {
  if (got.nbytes() != before.nbytes() || std::memcmp(got.data(), before.data(), got.nbytes()) != 0)
    stats->fail("input " + name + " was modified by the kernel");
}

}  // namespace dlfuse_conformance
