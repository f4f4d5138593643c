#include "sweep.h"

#include <random>
#include <sstream>

#include "host_tensor.h"
#include "reference.h"

namespace dlfuse_conformance {
namespace {

// Element budgets: keep a case well under a millisecond of reference work, so a default
// sweep costs seconds even under the sanitizers.
constexpr int64_t kMaxOut = 24000;     // output elements (add_mul) or batch x M x N (matmul)
constexpr int64_t kMaxMacs = 400000;  // batch x M x K x N

const int64_t kSmall[] = {1, 2, 3, 5, 7, 11, 13, 17};
const int64_t kLarge[] = {31, 37, 64, 127, 129, 131, 173, 257};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }
  bool chance(int percent) { return int(below(100)) < percent; }
  template <size_t N> int64_t pick(const int64_t (&a)[N]) { return a[below(N)]; }
  int64_t dim() { return chance(35) ? pick(kLarge) : pick(kSmall); }

  // A shape that broadcasts to `full`: each dim kept or 1, some leading dims dropped.
  std::vector<int64_t> broadcast_of(const std::vector<int64_t>& full) {
    const size_t drop = chance(40) ? below(full.size() + 1) : 0;
    std::vector<int64_t> s(full.begin() + long(drop), full.end());
    for (int64_t& d : s)
      if (chance(40)) d = 1;
    return s;
  }
  Layout input_layout(size_t rank) {
    switch (below(rank >= 2 ? 6 : 4)) {
      case 0: return Layout::kCompactExplicit;
      case 1: return Layout::kZeroStride;
      case 4: return Layout::kPadded;
      case 5: return Layout::kTransposed;
      default: return Layout::kCompact;
    }
  }
  Layout output_layout(size_t rank) {
    switch (below(rank >= 2 ? 5 : 3)) {
      case 0: return Layout::kCompactExplicit;
      case 3: return Layout::kPadded;
      case 4: return Layout::kTransposed;
      default: return Layout::kCompact;
    }
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Shrinks the largest dims until the shape fits the budget.
void fit(std::vector<int64_t>& s, int64_t budget) {
  while (product(s) > budget) {
    size_t big = 0;
    for (size_t i = 1; i < s.size(); ++i)
      if (s[i] > s[big]) big = i;
    s[big] = s[big] > 17 ? 13 : (s[big] + 1) / 2;
  }
}

std::string dims(const std::vector<int64_t>& s) {
  std::ostringstream o;
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "x" : "") << s[i];
  return s.empty() ? "scalar" : o.str();
}

void place(Gen& g, CaseSpec& s, const std::string& role, Layout layout, std::ostringstream& note,
           const std::vector<int64_t>& shape) {
  s.layout[role] = layout;
  if (g.chance(25)) s.offset[role] = int64_t(1 + g.below(5));
  note << " " << role << " " << dims(shape) << " " << layout_name(layout);
  if (s.offset.count(role)) note << "+" << s.offset[role];
}

CaseSpec add_mul_case(Gen& g, OpKind op, int i, bool out_form) {
  const bool bwd = op == OpKind::kAddMulBackward;
  CaseSpec s;
  s.op = op;
  const size_t rank = 1 + g.below(4);
  std::vector<int64_t> out(rank);
  for (int64_t& d : out) d = g.dim();
  fit(out, kMaxOut);
  s.x_shape = g.chance(70) ? out : g.broadcast_of(out);
  s.y_shape = g.broadcast_of(out);
  s.bias_shape = g.broadcast_of(out);
  // The broadcast of the three must be `out`: where all three came out 1, give x the dim.
  std::vector<int64_t> xy, got;
  broadcast_shapes(s.x_shape, s.y_shape, &xy);
  broadcast_shapes(xy, s.bias_shape, &got);
  if (got != out) s.x_shape = out;
  s.act = i % DLFUSE_ACT_COUNT;
  const double mults[] = {0.5, -1.25, 1.0, 0.0, 0.3, 2.0};
  s.multiplier = mults[g.below(6)];
  std::ostringstream note;
  note << "out " << dims(out) << ", act " << activation_name(s.act) << ", mult " << s.multiplier << ":";
  place(g, s, "x", g.input_layout(s.x_shape.size()), note, s.x_shape);
  place(g, s, "y", g.input_layout(s.y_shape.size()), note, s.y_shape);
  place(g, s, "bias", g.input_layout(s.bias_shape.size()), note, s.bias_shape);
  if (bwd) {
    place(g, s, "grad_out", g.input_layout(rank), note, out);
    place(g, s, "grad_x", g.output_layout(s.x_shape.size()), note, s.x_shape);
    place(g, s, "grad_y", g.output_layout(s.y_shape.size()), note, s.y_shape);
    place(g, s, "grad_bias", g.output_layout(s.bias_shape.size()), note, s.bias_shape);
    for (const char* r : {"grad_x", "grad_y", "grad_bias"})
      if (g.chance(15)) s.absent.insert(r);
  } else {
    place(g, s, "out", g.output_layout(rank), note, out);
    // In place needs x to be the whole output and writable: not a broadcast view.
    if (s.x_shape == out && s.layout["x"] != Layout::kZeroStride && g.chance(20)) s.in_place = true;
    if (g.chance(10)) s.special = Special::kNanInf;
  }
  s.generic_call = g.chance(20);
  // Drawn last, so that the cases of a kernel without ABI 1.1's inputs stay as they were.
  if (bwd && derivative_from_out(s.act) && g.chance(35) && out_form) s.from_out = true;
  for (const std::string& r : s.absent) note << ", " << r << " absent";
  if (s.from_out) note << ", from out (x, y, bias NULL)";
  if (s.in_place) note << ", in place";
  if (s.special == Special::kNanInf) note << ", NaN/Inf inputs";
  if (s.generic_call) note << ", dlfuse_op_call";
  s.note = note.str();
  return s;
}

// ABI 1.0's ops draw exactly what they always drew; the draws of 1.1's come after each
// step they extend, only for those ops.
CaseSpec matmul_case(Gen& g, OpKind op, int i) {
  const bool bwd = is_backward_op(op);
  const bool residual = op == OpKind::kMatmulResidual || op == OpKind::kMatmulResidualBackward;
  const bool act_op = op == OpKind::kMatmulAct || op == OpKind::kMatmulActBackward;
  CaseSpec s;
  s.op = op;
  const size_t brank = g.below(3);
  std::vector<int64_t> batch(brank);
  for (int64_t& d : batch) d = 1 + int64_t(g.below(3));
  s.a_batch = g.broadcast_of(batch);
  s.b_batch = g.broadcast_of(batch);
  std::vector<int64_t> bb;
  broadcast_shapes(s.a_batch, s.b_batch, &bb);
  const int64_t nb = product(bb);
  s.M = g.dim();
  s.N = g.dim();
  s.K = g.chance(5) ? 0 : g.dim();
  std::vector<int64_t> mn = {s.M, s.N};
  fit(mn, kMaxOut / nb);
  s.M = mn[0];
  s.N = mn[1];
  while (nb * s.M * s.N * s.K > kMaxMacs) s.K = s.K > 17 ? 13 : (s.K + 1) / 2;
  std::vector<int64_t> out = bb;
  out.push_back(s.M);
  out.push_back(s.N);
  s.bias_shape = g.broadcast_of(out);
  if (residual) s.residual_shape = g.chance(40) ? out : g.broadcast_of(out);
  s.allow_tf32 = g.chance(15);
  std::vector<int64_t> a = s.a_batch, b = s.b_batch;
  a.insert(a.end(), {s.M, s.K});
  b.insert(b.end(), {s.K, s.N});
  std::ostringstream note;
  if (act_op) {
    s.act = i % DLFUSE_ACT_COUNT;
    s.from_out = bwd && derivative_from_out(s.act) && g.chance(50);
  }
  note << dims(a) << " @ " << dims(b) << (s.allow_tf32 ? ", allow_tf32" : "");
  if (act_op) note << ", act " << activation_name(s.act) << (s.from_out ? " from out" : bwd ? " from pre" : "");
  note << ":";
  place(g, s, "a", g.input_layout(a.size()), note, a);
  place(g, s, "b", g.input_layout(b.size()), note, b);
  if (bwd) {
    place(g, s, "grad_out", g.input_layout(out.size()), note, out);
    if (op != OpKind::kMatmulResidualBackward)
      place(g, s, act_op && !s.from_out ? "pre" : "out", g.input_layout(out.size()), note, out);
    place(g, s, "grad_a", g.output_layout(a.size()), note, a);
    place(g, s, "grad_b", g.output_layout(b.size()), note, b);
    place(g, s, "grad_bias", g.output_layout(s.bias_shape.size()), note, s.bias_shape);
    if (residual) place(g, s, "grad_residual", g.output_layout(s.residual_shape.size()), note, s.residual_shape);
    for (const char* r : {"grad_a", "grad_b", "grad_bias"})
      if (g.chance(15)) s.absent.insert(r);
    if (residual && g.chance(15)) s.absent.insert("grad_residual");
    const bool relu = op == OpKind::kMatmulBackward || s.act == DLFUSE_ACT_RELU;
    if (g.chance(10) && relu && !residual) s.special = Special::kReluSelect;
  } else {
    place(g, s, "bias", g.input_layout(s.bias_shape.size()), note, s.bias_shape);
    place(g, s, "out", g.output_layout(out.size()), note, out);
    if (g.chance(10)) s.special = Special::kNanInf;
    if (residual) {
      place(g, s, "residual", g.input_layout(s.residual_shape.size()), note, s.residual_shape);
      // In place needs the residual to be the whole output and writable: not a broadcast view.
      if (s.residual_shape == out && s.layout["residual"] != Layout::kZeroStride && g.chance(25)) s.in_place = true;
    }
    if (act_op && g.chance(25)) s.absent.insert("pre");
    if (act_op && !s.absent.count("pre")) place(g, s, "pre", g.output_layout(out.size()), note, out);
  }
  s.generic_call = g.chance(20);
  for (const std::string& r : s.absent) note << ", " << r << " absent";
  if (s.in_place) note << ", in place (out is residual)";
  if (s.special != Special::kNone) note << (bwd ? ", relu select with NaN/Inf" : ", NaN/Inf inputs");
  if (s.generic_call) note << ", dlfuse_op_call";
  s.note = note.str();
  return s;
}

}  // namespace

std::vector<CaseSpec> sweep_cases(OpKind op, uint64_t seed, int count, bool out_form) {
  std::vector<CaseSpec> out;
  for (int i = 0; i < count; ++i) {
    // One generator per case: case i is the same whatever the count.
    Gen g(seed * 0x9E3779B97F4A7C15ull + uint64_t(op) * 0x100000001B3ull + uint64_t(i));
    g.rng().discard(8);
    CaseSpec s = is_matmul_op(op) ? matmul_case(g, op, i) : add_mul_case(g, op, i, out_form);
    char name[32];
    std::snprintf(name, sizeof name, "sweep_%03d", i);
    s.name = name;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dlfuse_conformance
