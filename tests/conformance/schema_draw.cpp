#include "schema_draw.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dlfuse_conformance {

std::string Problem::text(const SchemaOp& op) const {
  std::ostringstream s;
  for (size_t i = 0; i < in.size(); ++i)
    s << (i ? " " : "") << op.schema.inputs[i].name << (in[i] ? shape_text(*in[i]) : "=NULL");
  for (size_t a = 0; a < attrs.size(); ++a) {
    s << " " << op.schema.attrs[a].name << "=";
    if (attrs[a].type == DLFUSE_ATTR_INT64)
      s << attrs[a].value.i64;
    else
      s << attrs[a].value.f64;
  }
  return s.str();
}

std::vector<dlfuse_attr_t> default_attrs(const dlfuse_op_schema_t& s) {
  std::vector<dlfuse_attr_t> a;
  for (int i = 0; i < s.num_attrs; ++i) a.push_back(s.attrs[i].default_value);
  return a;
}

std::vector<dlfuse_attr_t> random_attrs(const dlfuse_op_schema_t& s, std::mt19937_64& rng) {
  std::vector<dlfuse_attr_t> a = default_attrs(s);
  for (int i = 0; i < s.num_attrs; ++i) {
    dlfuse_attr_t& v = a[size_t(i)];
    // A core op's ALLOW_TF32 = 1 loosens its float32 contract (docs/ops.md), which the
    // norm-wise tolerances do not model.
    if (s.plugin < 0 && std::string(s.attrs[i].name) == "ALLOW_TF32") continue;
    if (v.type == DLFUSE_ATTR_INT64) {
      int64_t lo = std::max<int64_t>(s.attrs[i].min_value, -16), hi = std::min<int64_t>(s.attrs[i].max_value, 16);
      if (lo > hi) lo = hi = v.value.i64;  // a range far from 0: keep the default
      v.value.i64 = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    } else {
      const double d = v.value.f64;
      const double mag = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
      const double sign = (rng() & 1) ? -1.0 : 1.0;
      v.value.f64 =
          d != 0.0 && std::isfinite(d) ? d * mag * sign : std::uniform_real_distribution<double>(-2.0, 2.0)(rng);
    }
  }
  return a;
}

namespace {

using Shape = std::vector<int64_t>;

// Small sizes that cross the usual thresholds: 1, odd, prime, powers of two and one past them.
const int64_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17};

// 1 an eighth of the time (broadcast_of adds more), the others uniformly.
int64_t dim(std::mt19937_64& rng) {
  const size_t n = sizeof kDims / sizeof kDims[0];
  return rng() % 8 == 0 ? 1 : kDims[1 + rng() % (n - 1)];
}

Shape random_shape(std::mt19937_64& rng, int rank) {
  Shape s(static_cast<size_t>(rank));
  for (int64_t& d : s) d = dim(rng);
  return s;
}

// `s` with some dims set to 1 and maybe leading dims dropped: a NumPy broadcast of it.
Shape broadcast_of(const Shape& s, std::mt19937_64& rng) {
  Shape b = s;
  for (int64_t& d : b)
    if (rng() % 3 == 0) d = 1;
  const size_t drop = rng() % (b.size() + 1);
  b.erase(b.begin(), b.begin() + std::ptrdiff_t(std::min(drop, b.size() - (b.empty() ? 0 : 1))));
  return b;
}

bool is_present(const dlfuse_arg_schema_t& a, bool optional) { return !(a.flags & DLFUSE_ARG_OPTIONAL) || optional; }

// One candidate: `mode` 0 every input the same shape, 1 broadcasts of one shape, 2 matmul.
std::vector<std::optional<Shape>> candidate(const dlfuse_op_schema_t& s, std::mt19937_64& rng, int mode, bool optional,
                                            int min_rank) {
  const int ni = s.num_inputs;
  std::vector<std::optional<Shape>> in(static_cast<size_t>(ni));
  const Shape base = random_shape(rng, min_rank + int(rng() % uint64_t(std::max(1, 4 - min_rank))));
  if (mode != 2) {
    for (int i = 0; i < ni; ++i)
      if (is_present(s.inputs[i], optional)) in[size_t(i)] = mode == 0 ? base : broadcast_of(base, rng);
    const int full = ni > 0 ? int(rng() % uint64_t(ni)) : 0;  // one input keeps the full shape
    if (mode == 1 && ni > 0 && in[size_t(full)]) in[size_t(full)] = base;
    return in;
  }
  const int64_t M = dim(rng), K = dim(rng), N = dim(rng);
  Shape batch;
  for (int b = int(rng() % 3); b > 0; --b) batch.push_back(dim(rng) % 4 + 1);
  auto with_batch = [&](Shape mn) {
    Shape r = batch;
    r.insert(r.end(), mn.begin(), mn.end());
    return r;
  };
  std::vector<bool> fed(static_cast<size_t>(ni), false);
  for (int o = 0; o < s.num_outputs; ++o) {
    if (s.outputs[o].shape_rule != DLFUSE_SHAPE_MATMUL) continue;
    int first = -1, second = -1;
    for (int i = 0; i < ni; ++i)
      if (s.outputs[o].shape_inputs & (1u << i)) (first < 0 ? first : second) = i;
    if (first >= 0 && second >= 0) {
      in[size_t(first)] = with_batch({M, K});
      in[size_t(second)] = with_batch({K, N});
      fed[size_t(first)] = fed[size_t(second)] = true;
    }
  }
  const Shape others[] = {{N}, {M, N}, {1, N}, {M, 1}};
  for (int i = 0; i < ni; ++i)
    if (!fed[size_t(i)] && is_present(s.inputs[i], optional)) in[size_t(i)] = others[rng() % 4];
  return in;
}

bool has_rule(const dlfuse_op_schema_t& s, int rule) {
  for (int o = 0; o < s.num_outputs; ++o)
    if (s.outputs[o].shape_rule == rule) return true;
  return false;
}

}  // namespace

bool draw_problem(const SchemaOp& op, DLDataType dt, std::mt19937_64& rng, const std::vector<dlfuse_attr_t>& attrs,
                  bool optional, Problem* p, std::string* err, int64_t max_numel, int min_rank) {
  const dlfuse_op_schema_t& s = op.schema;
  const bool matmul = has_rule(s, DLFUSE_SHAPE_MATMUL);
  std::string last;
  for (int attempt = 0; attempt < 64; ++attempt) {
    // Optional inputs absent in the second half when the op refused them all present.
    const bool opt = optional && attempt < 32;
    // Without a MATMUL rule: one shape for all at min_rank >= 2 (the layouts' draw), else
    // broadcasts first.
    const int mode = matmul ? (attempt % 4 == 3 ? int(rng() % 2) : 2) : min_rank >= 2 ? 0 : (attempt + 1) % 2;
    p->in = candidate(s, rng, mode, opt, min_rank);
    p->attrs = attrs;
    bool small = true;
    for (const auto& t : p->in) small &= !t || numel(*t) <= max_numel;
    if (!small) continue;
    if (!infer_output_shapes(op, dt, p->in, attrs, &p->out, &last)) continue;
    for (const auto& t : p->out) small &= numel(t) <= max_numel;
    if (small) return true;
  }
  if (last.empty()) last = "(every draw had a tensor over " + std::to_string(max_numel) + " elements)";
  *err = "no input shapes drawn from the schema's shape rules were accepted in 64 tries; last refusal: " + last;
  return false;
}

}  // namespace dlfuse_conformance
