#include "sweep.h"

#include <algorithm>
#include <random>
#include <sstream>

#include "host_tensor.h"
#include "reference.h"

namespace dlfuse_conformance {
namespace {

// ---- The earlier draws (two cases in six) --------------------------------------------
//
// Cases i with i % 6 < 2 are drawn exactly as the generator of earlier versions drew
// them, so that a case pinned elsewhere by seed and index (the oneDNN plugin's
// regressions, plugins/onednn/tests/CMakeLists.txt) stays what it was.

// Element budgets: keep a case well under a millisecond of reference work, so a default
// sweep costs seconds even under the sanitizers.
constexpr int64_t kMaxOut = 24000;    // output elements (add_mul) or batch x M x N (matmul)
constexpr int64_t kMaxMacs = 400000;  // batch x M x K x N

const int64_t kSmall[] = {1, 2, 3, 5, 7, 11, 13, 17};
const int64_t kLarge[] = {31, 37, 64, 127, 129, 131, 173, 257};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }
  bool chance(int percent) { return int(below(100)) < percent; }
  template <size_t N>
  int64_t pick(const int64_t (&a)[N]) {
    return a[below(N)];
  }
  // An entry of the ascending list `a` that is at most `max` (the first entry if none is).
  template <size_t N>
  int64_t pick_upto(const int64_t (&a)[N], int64_t max) {
    size_t n = 0;
    while (n < N && a[n] <= max) ++n;
    return n ? a[below(n)] : a[0];
  }
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

CaseSpec earlier_add_mul_case(Gen& g, OpKind op, int i, bool out_form) {
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
CaseSpec earlier_matmul_case(Gen& g, OpKind op, int i) {
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

// ---- The drawn forms (four cases in six) ---------------------------------------------
//
// Each of these cases takes its place `t` among them (shifted by a rotation of the seed's)
// through cycles of coprime periods, so that any run of consecutive cases meets every
// entry of each cycle, and the pairs of the bias form (7) and the bias layout (6) within
// 42 of them; the sizes inside a form, the other layouts, offsets, multipliers and the
// rest are drawn.

// Sizes either side of the plugins' thresholds: odd and prime, powers of two (16-byte
// rows, whole vec4s), one short of and one past a tile or block (the OpenCL CPU kernel's
// 6 x 16 blocks and its 24-row threshold for packing B, the WebGPU GEMM's 64 x 128 tiles
// and k-steps of 8, the OpenCL GPU kernels' 64 and 128 tiles).
const int64_t kEdge[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,   13,  15,  16,  17,  23,
                         24, 25, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257};
// 1-D lengths: the same, then either side of 2^9, 2^10, 2^12 and of the oneDNN plugin's
// tile of 16384 elements.
const int64_t kVector[] = {1,   2,   3,   4,   5,   7,   8,    16,   17,   63,   64,   65,   127,   128,   129,
                           255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 16383, 16384, 16385};
const int64_t kSmallEdge[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 17};
const int64_t kAligned[] = {4, 8, 16, 32, 64, 128, 256};
// K of rows that are never a multiple of 16 bytes (odd: in no dtype).
const int64_t kUnalignedK[] = {13, 31, 37, 127, 255, 287};
const int64_t kLongK[] = {1023, 1024, 1025};
// Outputs of 2^15 + 1 to 2^15 + 2^12 elements, past the size at which the oneDNN plugin's
// passes take threads (and past its 16384-element tiles): their last dims.
const int64_t kWorkCols[] = {31, 64, 127, 128, 129, 255, 256, 257, 1024, 1025};
constexpr int64_t kWorkMin = (int64_t(1) << 15) + 1, kWorkMax = (int64_t(1) << 15) + (int64_t(1) << 12);
constexpr int64_t kTallRows = 65537;
// GPU device types only: GEMMs with the work at which a GPU plugin changes course (the CUDA
// plugin leaves its small-GEMM kernel above 2^18 multiply-adds, and pads rows that are not
// 16-byte aligned from 64 multiply-adds per copied element), at most 2^26 multiply-adds
// (a fraction of a second of float64 reference).
const int64_t kGemmM[] = {219, 256, 512, 1000};
const int64_t kGemmN[] = {130, 202, 256, 512};
const int64_t kGemmUnalignedK[] = {255, 287, 301};
const int64_t kGemmAlignedK[] = {64, 128, 256};
constexpr int64_t kGemmMaxMacs = int64_t(1) << 26;

bool gpu_device_type(int32_t t) { return t == kDLCUDA || t == kDLCUDAManaged || t == kDLROCM || t == kDLMetal; }

struct Place {
  uint64_t t;
  int cycle(int period) const { return int(t % uint64_t(period)); }
};

// The bias layouts of the cycle; an output (grad_bias) takes the second list, whose last
// entry is compact at an odd byte_offset.
const Layout kBiasIn[] = {Layout::kCompact,    Layout::kPadded,    Layout::kTransposed,
                          Layout::kZeroStride, Layout::kBroadcast, Layout::kColumnSlice};
const Layout kBiasOut[] = {Layout::kCompact,     Layout::kPadded,          Layout::kTransposed,
                           Layout::kColumnSlice, Layout::kCompactExplicit, Layout::kCompact};

// The layouts of the other roles, by a pattern drawn per case: 0 all compact (NULL
// strides, no offset: the plugins' fast paths), 1 explicit strides at offsets of 0, 4 or 8
// elements (vec4 alignment kept), 2 each role drawn from every layout, 3 strided outputs,
// 4 strided inputs.
enum Pattern { kAllCompact, kExplicitAligned, kAnyLayout, kStridedOutputs, kStridedInputs, kPatterns };
const char* const kPatternNames[] = {"compact", "explicit", "any", "strided outputs", "strided inputs"};

void put(CaseSpec& s, const std::string& role, Layout layout, int64_t offset, std::ostringstream& note,
         const std::vector<int64_t>& shape) {
  s.layout[role] = layout;
  if (offset) s.offset[role] = offset;
  note << " " << role << " " << dims(shape) << " " << layout_name(layout);
  if (offset) note << "+" << offset;
}

// An input that repeats one value (every stride 0) or one row (the first dim of size > 1 at
// stride 0) feeds the gradients sums of equal terms, whose float32 rounding adds up rather
// than cancels: at most 257 repeats (the earlier draws' largest dim), so that every sum
// stays within docs/ops.md's tolerances; a longer one is padded instead.
Layout bounded_repeats(Layout l, const std::vector<int64_t>& shape) {
  int64_t repeats = 1;
  if (l == Layout::kBroadcast) repeats = product(shape);
  if (l == Layout::kZeroStride)
    for (int64_t d : shape)
      if (d > 1) {
        repeats = d;
        break;
      }
  return repeats > 257 ? Layout::kPadded : l;
}

void lay(Gen& g, CaseSpec& s, int pattern, const std::string& role, bool input, std::ostringstream& note,
         const std::vector<int64_t>& shape) {
  static const Layout kAnyIn[] = {Layout::kCompact,    Layout::kCompactExplicit, Layout::kPadded,
                                  Layout::kTransposed, Layout::kZeroStride,      Layout::kBroadcast,
                                  Layout::kColumnSlice};
  static const Layout kAnyOut[] = {Layout::kCompact, Layout::kCompactExplicit, Layout::kPadded, Layout::kTransposed,
                                   Layout::kColumnSlice};
  static const Layout kStridedIn[] = {Layout::kPadded, Layout::kTransposed, Layout::kZeroStride, Layout::kBroadcast,
                                      Layout::kColumnSlice};
  static const Layout kStridedOut[] = {Layout::kPadded, Layout::kTransposed, Layout::kColumnSlice};
  Layout l = Layout::kCompact;
  int64_t off = 0;
  switch (pattern) {
    case kAllCompact: break;
    case kExplicitAligned:
      l = Layout::kCompactExplicit;
      off = 4 * int64_t(g.below(3));
      break;
    case kAnyLayout: l = input ? kAnyIn[g.below(7)] : kAnyOut[g.below(5)]; break;
    case kStridedOutputs:
      if (!input) l = kStridedOut[g.below(3)];
      break;
    case kStridedInputs:
      if (input) l = kStridedIn[g.below(5)];
      break;
  }
  if (pattern >= kAnyLayout && g.chance(25)) off = int64_t(1 + g.below(5));
  put(s, role, bounded_repeats(l, shape), off, note, shape);
}

// The bias (input) or its gradient (output) in the layout class of the cycle.
void lay_bias(Gen& g, CaseSpec& s, const Place& p, const std::string& role, bool input, std::ostringstream& note,
              const std::vector<int64_t>& shape) {
  const int c = p.cycle(6);
  const int64_t off = !input && c == 5 ? int64_t(1 + 2 * g.below(2)) : g.chance(20) ? int64_t(1 + g.below(5)) : 0;
  put(s, role, input ? bounded_repeats(kBiasIn[c], shape) : kBiasOut[c], off, note, shape);
}

bool writable(const CaseSpec& s, const std::string& role) {
  auto it = s.layout.find(role);
  return it == s.layout.end() || (it->second != Layout::kZeroStride && it->second != Layout::kBroadcast);
}

// How an input of add_mul_activation lies over out; the bias takes them in turn.
enum InForm { kInRow, kInColumn, kInFull, kInLower, kInScalar, kInSome, kInRowOnes, kInForms };
const char* const kInFormNames[] = {"row",    "column",    "full",         "out's without its leading dims",
                                    "scalar", "some dims", "row with ones"};

std::vector<int64_t> in_shape(Gen& g, int form, const std::vector<int64_t>& out) {
  const size_t r = out.size();
  switch (form) {
    case kInRow: return r ? std::vector<int64_t>{out.back()} : out;
    case kInRowOnes: {
      std::vector<int64_t> s(r, 1);
      if (r) s.back() = out.back();
      return s;
    }
    case kInColumn: {
      if (r < 2) return std::vector<int64_t>(g.chance(50) ? 1 : 0, 1);
      std::vector<int64_t> s = out;
      s.back() = 1;
      if (g.chance(50)) s.erase(s.begin(), s.end() - 2);  // [R, 1]
      return s;
    }
    case kInFull: return out;
    case kInLower: {
      size_t drop = 0;
      while (drop + 1 < r && out[drop] == 1) ++drop;
      if (drop == 0 && r >= 2) drop = 1;  // no leading 1s: a broadcast over the first dim
      return std::vector<int64_t>(out.begin() + long(drop), out.end());
    }
    case kInScalar: {
      const uint64_t k = g.below(3);
      return k == 0 ? std::vector<int64_t>{} : k == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>(r, 1);
    }
    default: return g.broadcast_of(out);
  }
}

// A gradient sums numel(out) / numel(shape) terms per element: past kMaxOut (an output past
// 2^15 elements and a scalar or partial input) the input becomes a row over the last dim,
// so that no sum is longer than the earlier draws' (24 000 terms, docs/ops.md).
std::vector<int64_t> within_sums(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  if (product(out) <= kMaxOut * std::max<int64_t>(1, product(shape))) return shape;
  return std::vector<int64_t>(1, out.back());
}

enum AmForm { kAmVector, kAmRows, kAmLeadingOnes, kAmWork, kAmBatched, kAmForms };
const char* const kAmFormNames[] = {"vector", "rows", "leading ones", "work", "batched"};

CaseSpec add_mul_form(Gen& g, OpKind op, int i, const Place& p, bool out_form) {
  const bool bwd = op == OpKind::kAddMulBackward;
  CaseSpec s;
  s.op = op;
  const int form = p.cycle(kAmForms);
  std::vector<int64_t> out;
  int pattern = int(g.below(kPatterns));
  bool tall = false, deep = false;
  switch (form) {
    case kAmVector: out = {g.pick(kVector)}; break;
    case kAmRows: {
      const int64_t c = g.pick(kEdge);
      out = {g.pick_upto(kVector, kMaxOut / c), c};
      // Every third, in the forward only (no sums): 65537 rows of a transposed out, which no
      // dims merge with, a grid of more workgroups in a dimension than GPU APIs allow (65535).
      if (!bwd && (p.t / kAmForms) % 3 == 0) {
        out = {kTallRows, 2 + int64_t(g.below(2))};
        tall = true;
      }
      break;
    }
    case kAmLeadingOnes: {
      const int64_t c = g.pick(kEdge);
      out = std::vector<int64_t>(1 + g.below(2), 1);
      if (g.chance(75)) out.push_back(g.pick_upto(kEdge, kMaxOut / c));
      out.push_back(c);
      break;
    }
    case kAmWork: {
      const int64_t c = g.pick(kWorkCols), lo = (kWorkMin + c - 1) / c, hi = kWorkMax / c;
      const int64_t rows = lo + int64_t(g.below(uint64_t(hi - lo + 1)));
      out = rows % 2 == 0 && g.chance(40) ? std::vector<int64_t>{2, rows / 2, c} : std::vector<int64_t>{rows, c};
      if (g.chance(60)) pattern = int(g.below(2));  // the threads of the fast paths
      break;
    }
    default: {
      out.resize(3 + g.below(2));
      for (int64_t& d : out) d = g.chance(30) ? g.pick(kEdge) : g.pick(kSmallEdge);
      fit(out, kMaxOut);
      // Every third rank 7, kept dims between summed ones: a reduction over four groups of
      // kept dims, each element a sum of 128 terms (WebGPU's two levels, once per group),
      // past the 6 dims whose layouts the registry remembers.
      if ((p.t / kAmForms) % 3 == 1) {
        out = {2, 8, 2, 4, 2, 4, 2};
        for (size_t k = 0; k < out.size(); k += 2) out[k] += int64_t(g.below(2));
        deep = true;
      }
      break;
    }
  }
  const int bias_form = p.cycle(kInForms);
  int x_form = g.chance(60) ? int(kInFull) : int(g.below(kInForms)), y_form = int(g.below(kInForms));
  if (form == kAmWork) {
    x_form = kInFull;
    if (g.chance(60)) y_form = kInFull;
  }
  if (form == kAmLeadingOnes) {  // written directly, of fewer dims than out: x, y or both
    const int who = int((p.t / kAmForms) % 3);
    if (who != 1) x_form = kInLower;
    if (who != 0) y_form = kInLower;
  }
  // Ranks 3-4 with x and y whole: every gradient written directly when the bias is whole or
  // grad_bias absent, over dims that need not merge into rows.
  if (form == kAmBatched && !deep && g.chance(40)) x_form = y_form = kInFull;
  s.x_shape = in_shape(g, x_form, out);
  s.y_shape = in_shape(g, y_form, out);
  if (deep) {
    s.y_shape = out;
    for (size_t k = 1; k < out.size(); k += 2) s.y_shape[k] = 1;
  }
  s.bias_shape = in_shape(g, bias_form, out);
  for (std::vector<int64_t>* t : {&s.x_shape, &s.y_shape, &s.bias_shape}) *t = within_sums(*t, out);
  std::vector<int64_t> xy, got;
  broadcast_shapes(s.x_shape, s.y_shape, &xy);
  broadcast_shapes(xy, s.bias_shape, &got);
  if (got != out) s.x_shape = out;
  s.act = i % DLFUSE_ACT_COUNT;
  const double mults[] = {0.5, -1.25, 1.0, 0.0, 0.3, 2.0};
  s.multiplier = mults[g.below(6)];
  std::ostringstream note;
  note << kAmFormNames[form] << ", " << kPatternNames[pattern] << ", bias " << kInFormNames[bias_form] << ": out "
       << dims(out) << ", act " << activation_name(s.act) << ", mult " << s.multiplier << ":";
  lay(g, s, pattern, "x", true, note, s.x_shape);
  lay(g, s, pattern, "y", true, note, s.y_shape);
  if (bwd) {
    lay(g, s, pattern, "bias", true, note, s.bias_shape);
    lay(g, s, pattern, "grad_out", true, note, out);
    lay(g, s, pattern, "grad_x", false, note, s.x_shape);
    lay(g, s, pattern, "grad_y", false, note, s.y_shape);
    lay_bias(g, s, p, "grad_bias", false, note, s.bias_shape);
    // Every subset of the gradients absent in turn, none absent in 6 of 13.
    const int absent = p.cycle(13);
    const char* const grads[] = {"grad_x", "grad_y", "grad_bias"};
    for (int k = 0; k < 3; ++k)
      if (absent < 8 && (absent >> k & 1)) s.absent.insert(grads[k]);
    // relu's select needs pre's sign exact in float32: a dyadic multiplier (not 0.3).
    if (g.chance(10) && s.act == DLFUSE_ACT_RELU && s.multiplier != 0.3) s.special = Special::kReluSelect;
  } else {
    lay_bias(g, s, p, "bias", true, note, s.bias_shape);
    if (tall)
      put(s, "out", Layout::kTransposed, 0, note, out);
    else
      lay(g, s, pattern, "out", false, note, out);
    if (!tall && s.x_shape == out && writable(s, "x") && g.chance(25)) s.in_place = true;
    if (g.chance(10)) s.special = Special::kNanInf;
  }
  s.generic_call = g.chance(20);
  // Drawn last, so that the cases of a kernel without ABI 1.1's inputs stay as they are.
  if (bwd && out_form && derivative_from_out(s.act) && g.chance(35)) s.from_out = true;
  if (bwd && out_form && !s.from_out && s.generic_call && g.chance(30)) s.v11_inputs = true;
  for (const std::string& r : s.absent) note << ", " << r << " absent";
  if (s.from_out) note << ", from out (x, y, bias NULL)";
  if (s.v11_inputs) note << ", five inputs (out NULL)";
  if (s.in_place) note << ", in place";
  if (s.special == Special::kNanInf) note << ", NaN/Inf inputs";
  if (s.special == Special::kReluSelect) note << ", relu select with NaN/Inf";
  if (s.generic_call) note << ", dlfuse_op_call";
  s.note = note.str();
  return s;
}

enum MmForm { kMmEdges, kMmAligned, kMmUnalignedK, kMmWork, kMmBatched, kMmForms };
const char* const kMmFormNames[] = {"edges", "aligned", "unaligned K", "work", "batched"};
enum BiasForm { kBiasRow, kBiasColumn, kBiasMN, kBiasFull, kBiasScalar, kBiasBatchRow, kBiasBatchColumn, kBiasForms };
const char* const kBiasFormNames[] = {"row", "column", "MxN", "full", "scalar", "row per batch", "column per batch"};

std::vector<int64_t> matmul_bias(Gen& g, int form, const std::vector<int64_t>& batch, int64_t M, int64_t N) {
  std::vector<int64_t> s;
  switch (form) {
    case kBiasRow: return g.chance(50) ? std::vector<int64_t>{N} : std::vector<int64_t>{1, N};
    case kBiasColumn: return {M, 1};
    case kBiasMN: return {M, N};
    case kBiasScalar: {
      const uint64_t k = g.below(3);
      return k == 0 ? s : k == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 1};
    }
    default:
      s = batch;
      s.push_back(form == kBiasBatchRow ? 1 : M);
      s.push_back(form == kBiasBatchColumn ? 1 : N);
      return s;
  }
}

// Draws the dims `order` points to (s's M, N or K) in turn from the ascending `sizes`,
// each within what the output and multiply-add budgets leave (dims not drawn yet count as 1).
template <size_t L>
void draw_dims(Gen& g, CaseSpec& s, int64_t nb, const int64_t (&sizes)[L], const std::vector<int64_t*>& order) {
  for (int64_t* d : order) *d = 1;
  for (int64_t* d : order) {
    int64_t cap = kMaxMacs / (nb * s.M * s.N * s.K);
    if (d != &s.K) cap = std::min(cap, kMaxOut / (nb * s.M * s.N));
    cap = std::max<int64_t>(1, cap);
    *d = cap < sizes[0] ? cap : g.pick_upto(sizes, cap);
  }
}

// M, N and K with a random one first: any of them can be the large one.
std::vector<int64_t*> first_of(Gen& g, CaseSpec& s) {
  std::vector<int64_t*> order = {&s.M, &s.N, &s.K};
  std::swap(order[0], order[size_t(g.below(3))]);
  return order;
}

CaseSpec matmul_form(Gen& g, OpKind op, int i, const Place& p, bool gpu) {
  const bool bwd = is_backward_op(op);
  const bool residual = op == OpKind::kMatmulResidual || op == OpKind::kMatmulResidualBackward;
  const bool act_op = op == OpKind::kMatmulAct || op == OpKind::kMatmulActBackward;
  CaseSpec s;
  s.op = op;
  const int form = p.cycle(kMmForms);
  const bool gemm = gpu && (form == kMmAligned || form == kMmUnalignedK);
  int pattern = int(g.below(kPatterns));
  std::vector<int64_t> batch;
  if (form == kMmEdges) {
    batch.resize(g.below(3));
    for (int64_t& d : batch) d = 1 + int64_t(g.below(3));
  } else if (form == kMmBatched) {
    batch.resize(1 + g.below(3));
    for (int64_t& d : batch) d = g.chance(25) ? 1 : 1 + int64_t(g.below(4));
  } else if (!gemm && g.chance(30)) {
    batch = {1 + int64_t(g.below(2))};
  }
  s.a_batch = g.broadcast_of(batch);
  s.b_batch = g.broadcast_of(batch);
  std::vector<int64_t> bb;
  broadcast_shapes(s.a_batch, s.b_batch, &bb);
  const int64_t nb = std::max<int64_t>(1, product(bb));
  switch (form) {
    case kMmAligned:
      if (gemm) {
        s.M = g.chance(50) ? 256 : 512;
        s.N = g.chance(50) ? 256 : 512;
        s.K = g.pick_upto(kGemmAlignedK, kGemmMaxMacs / (s.M * s.N));
      } else {
        draw_dims(g, s, nb, kAligned, first_of(g, s));
      }
      if (g.chance(70)) pattern = int(g.below(2));  // vec4 reads, 16-byte rows
      break;
    case kMmUnalignedK:
      if (gemm) {
        s.M = g.pick(kGemmM);
        s.N = g.pick(kGemmN);
        if (s.M * s.N * kGemmUnalignedK[0] > kGemmMaxMacs) s.N = 202;
        s.K = g.pick_upto(kGemmUnalignedK, kGemmMaxMacs / (s.M * s.N));
      } else {
        s.K = g.pick(kUnalignedK);
        const bool m_first = g.chance(50);
        draw_dims(g, s, nb, kEdge, m_first ? std::vector<int64_t*>{&s.M, &s.N} : std::vector<int64_t*>{&s.N, &s.M});
      }
      break;
    case kMmWork: {
      s.N = g.pick(kWorkCols);
      const int64_t lo = (kWorkMin + nb * s.N - 1) / (nb * s.N), hi = std::max(lo, kWorkMax / (nb * s.N));
      s.M = lo + int64_t(g.below(uint64_t(hi - lo + 1)));
      s.K = 1 + int64_t(g.below(4));
      if (g.chance(60)) pattern = int(g.below(2));
      break;
    }
    case kMmBatched:
      if (g.chance(15)) {  // a long sum
        s.K = g.pick(kLongK);
        draw_dims(g, s, nb, kSmallEdge, {&s.M, &s.N});
      } else {
        draw_dims(g, s, nb, kSmallEdge, first_of(g, s));
      }
      break;
    default: draw_dims(g, s, nb, kEdge, first_of(g, s)); break;
  }
  if (form != kMmWork && !gemm && g.chance(5)) s.K = 0;
  std::vector<int64_t> out = bb;
  out.push_back(s.M);
  out.push_back(s.N);
  const int bias_form = p.cycle(kBiasForms);
  s.bias_shape = within_sums(matmul_bias(g, bias_form, bb, s.M, s.N), out);
  if (residual)
    s.residual_shape = g.chance(40) ? out : within_sums(matmul_bias(g, int(g.below(kBiasForms)), bb, s.M, s.N), out);
  s.allow_tf32 = g.chance(15);
  std::vector<int64_t> a = s.a_batch, b = s.b_batch;
  a.insert(a.end(), {s.M, s.K});
  b.insert(b.end(), {s.K, s.N});
  std::ostringstream note;
  if (act_op) {
    s.act = i % DLFUSE_ACT_COUNT;
    s.from_out = bwd && derivative_from_out(s.act) && g.chance(50);
  }
  note << kMmFormNames[form] << (gemm ? " (GEMM-sized)" : "") << ", " << kPatternNames[pattern] << ", bias "
       << kBiasFormNames[bias_form] << ": " << dims(a) << " @ " << dims(b) << (s.allow_tf32 ? ", allow_tf32" : "");
  if (act_op) note << ", act " << activation_name(s.act) << (s.from_out ? " from out" : bwd ? " from pre" : "");
  note << ":";
  if (pattern == kStridedInputs && g.chance(50)) pattern = kAnyLayout;  // transposed operands among them
  lay(g, s, pattern, "a", true, note, a);
  lay(g, s, pattern, "b", true, note, b);
  if (bwd) {
    lay(g, s, pattern, "grad_out", true, note, out);
    if (op != OpKind::kMatmulResidualBackward)
      lay(g, s, pattern, act_op && !s.from_out ? "pre" : "out", true, note, out);
    lay(g, s, pattern, "grad_a", false, note, a);
    lay(g, s, pattern, "grad_b", false, note, b);
    lay_bias(g, s, p, "grad_bias", false, note, s.bias_shape);
    std::vector<const char*> grads = {"grad_a", "grad_b", "grad_bias"};
    if (residual) {
      lay(g, s, pattern, "grad_residual", false, note, s.residual_shape);
      grads.push_back("grad_residual");
    }
    // Every subset of the gradients absent in turn (none absent in 6 of 13, or 8 of 24).
    const int absent = residual ? p.cycle(24) : p.cycle(13);
    for (size_t k = 0; k < grads.size(); ++k)
      if (absent < (1 << grads.size()) && (absent >> k & 1)) s.absent.insert(grads[k]);
    const bool relu = op == OpKind::kMatmulBackward || s.act == DLFUSE_ACT_RELU;
    if (g.chance(10) && relu && !residual) s.special = Special::kReluSelect;
  } else {
    lay_bias(g, s, p, "bias", true, note, s.bias_shape);
    lay(g, s, pattern, "out", false, note, out);
    if (g.chance(10)) s.special = Special::kNanInf;
    if (residual) {
      lay(g, s, pattern, "residual", true, note, s.residual_shape);
      if (s.residual_shape == out && writable(s, "residual") && g.chance(25)) s.in_place = true;
    }
    // pre absent in 4 of 11.
    if (act_op && p.cycle(11) < 4) s.absent.insert("pre");
    if (act_op && !s.absent.count("pre")) lay(g, s, pattern, "pre", false, note, out);
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

std::vector<CaseSpec> sweep_cases(OpKind op, uint64_t seed, int count, bool out_form, int32_t device_type) {
  const bool gpu = gpu_device_type(device_type);
  // Where this seed's cycles start (per op): any run of cases still meets every entry.
  Gen start(seed * 0xD1B54A32D192ED03ull + uint64_t(op) * 0x2545F4914F6CDD1Dull + 0x51EDull);
  start.rng().discard(8);
  const uint64_t shift = start.below(uint64_t(1) << 30);
  std::vector<CaseSpec> out;
  for (int i = 0; i < count; ++i) {
    // One generator per case: case i is the same whatever the count.
    Gen g(seed * 0x9E3779B97F4A7C15ull + uint64_t(op) * 0x100000001B3ull + uint64_t(i));
    g.rng().discard(8);
    CaseSpec s;
    if (i % 6 < 2) {
      s = is_matmul_op(op) ? earlier_matmul_case(g, op, i) : earlier_add_mul_case(g, op, i, out_form);
    } else {
      const Place p{shift + uint64_t(i / 6) * 4 + uint64_t(i % 6 - 2)};
      s = is_matmul_op(op) ? matmul_form(g, op, i, p, gpu) : add_mul_form(g, op, i, p, out_form);
    }
    char name[32];
    std::snprintf(name, sizeof name, "sweep_%03d", i);
    s.name = name;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dlfuse_conformance
