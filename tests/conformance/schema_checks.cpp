#include "schema_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"
#include "dtypes.h"
#include "schema_bad.h"
#include "schema_draw.h"
#include "schema_grad.h"

namespace dlfuse_conformance {

HostTensor random_tensor(DLDataType dt, const std::vector<int64_t>& shape, std::mt19937_64& rng, Layout layout,
                         int64_t offset) {
  HostTensor t(dt, shape, layout, offset);
  t.fill_buffer(kPoison);
  t.fill_random(rng, -1.0, 1.0);
  return t;
}

HostTensor poisoned_tensor(DLDataType dt, const std::vector<int64_t>& shape, Layout layout, int64_t offset) {
  HostTensor t(dt, shape, layout, offset);
  t.fill_buffer(kPoison);
  return t;
}

HostTensor converted(const HostTensor& t, DLDataType dt, bool output) {
  HostTensor c = poisoned_tensor(dt, t.shape());
  if (!output)
    for (int64_t i = 0; i < t.numel(); ++i) c.set(i, t.get(i));
  return c;
}

SchemaArgs converted(const SchemaArgs& a, DLDataType dt) {
  SchemaArgs c = a;
  for (auto& t : c.in)
    if (t) t = converted(*t, dt, false);
  for (auto& t : c.out)
    if (t) t = converted(*t, dt, true);
  return c;
}

void compare_normwise(const std::string& name, const HostTensor& got, const std::vector<double>& ref, DLDataType dt,
                      double factor, CheckStats* stats) {
  double big = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) big = std::max(big, std::fabs(r));
  RefOut out;
  out.shape = got.shape();
  out.val = ref;
  out.scale.resize(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) out.scale[i] = std::fabs(ref[i]) + big;
  Tolerance tol = tolerance_for(dt);
  tol.rtol *= factor;
  tol.atol *= factor;
  check_values(name, got, out, tol, stats);
}

namespace {

std::string num(double v) {
  std::ostringstream s;
  s.precision(3);
  s << v;
  return s.str();
}

class Checker {
 public:
  Checker(dlfuse_registry_t reg, DLDataType dt, DLDevice dev, const SchemaCheckOptions& opts)
      : reg_(reg), dt_(dt), dev_(dev), opts_(opts), rng_(opts.seed) {}

  std::vector<SchemaRow> run(const std::string& name);

 private:
  bool wanted(const std::string& c) const { return !opts_.wanted || opts_.wanted(c); }
  void add(SchemaRow r) { rows_.push_back(std::move(r)); }
  void add(bool pass, const std::string& name, const std::string& detail) {
    add(SchemaRow{pass, name, -1, -1, detail});
  }
  void value_row(const std::string& name, const CheckStats& s, const std::string& ok_detail) {
    add(SchemaRow{
        s.bad == 0 && s.checked > 0, name, s.max_abs, s.max_ratio,
        s.bad ? std::to_string(s.bad) + " of " + std::to_string(s.checked) + " elements bad; first: " + s.first_bad
        : s.checked ? ok_detail
                    : "nothing compared"});
  }
  bool serves(const SchemaOp& op, DLDataType dt, int32_t device_type) const {
    int32_t p = -1;
    return dlfuse_op_resolve(op.handle, device_type, dt, &p) == DLFUSE_STATUS_OK;
  }
  // A problem of `op_` and its arguments: a forward op's drawn from its schema, a backward's
  // made from a call of its forward (schema_grad.h).
  bool make_args(int draw, SchemaArgs* args, std::string* text, std::string* err);
  SchemaResult call(const SchemaArgs& a, int stale_run = -1) const {
    return run_schema_call(reg_, dev_, op_, a, stale_run);
  }
  // The runs of one call: stale memory, repeats, bit-identical, untouched inputs and guard slots.
  bool check_runs(const std::string& name, const SchemaArgs& args, SchemaResult* first);
  void check_against(const std::string& name, const SchemaArgs& args, const SchemaResult& got, dlfuse_registry_t reg,
                     DLDevice dev, DLDataType ref_dt, double factor, const std::string& what);
  void check_layouts(const SchemaArgs& args, const SchemaResult& base);
  void check_broadcasts(const SchemaArgs& args, const SchemaResult& base);
  void check_in_place(const SchemaArgs& args, const SchemaResult& base);
  void check_absent_outputs(const SchemaArgs& args, const SchemaResult& base);
  void check_reducible(const SchemaArgs& args);
  void check_threads(const std::vector<SchemaArgs>& calls);
  // Every present output of `got` against `ref`'s, norm-wise at `factor` times dt's tolerance.
  CheckStats compare_outputs(const SchemaResult& got, const SchemaResult& ref, double factor) const;

  dlfuse_registry_t reg_;
  DLDataType dt_;
  DLDevice dev_;
  const SchemaCheckOptions& opts_;
  std::mt19937_64 rng_;
  SchemaOp op_, fwd_;
  bool backward_ = false;
  std::string prefix_;  // of the structural checks' names: "" for draw 0, "draw:N:" for later ones
  std::vector<SchemaRow> rows_;
};

CheckStats Checker::compare_outputs(const SchemaResult& got, const SchemaResult& ref, double factor) const {
  CheckStats s;
  for (size_t o = 0; o < got.out.size() && o < ref.out.size(); ++o)
    if (got.out[o] && ref.out[o])
      compare_normwise(op_.schema.outputs[o].name, *got.out[o], ref.out[o]->values(), dt_, factor, &s);
  return s;
}

bool Checker::make_args(int draw, SchemaArgs* args, std::string* text, std::string* err) {
  std::mt19937_64 rng(opts_.seed * 1000003u + uint64_t(draw));
  const SchemaOp& base = backward_ ? fwd_ : op_;
  const std::vector<dlfuse_attr_t> attrs = draw == 0 ? default_attrs(base.schema) : random_attrs(base.schema, rng);
  Problem p;
  // Draw 0 has inputs of 2 dims or more, for the layouts that need them; the threads
  // stage's own draw (draw == opts_.draws) 3 dims, so that its calls take long enough to overlap.
  // (An op whose rules refuse such inputs, say one of vectors, gets what it accepts.)
  const bool big = draw == opts_.draws;
  const int min_rank = big ? 3 : draw == 0 ? 2 : 1;
  bool found = false;
  for (int r = min_rank; r >= 1 && !found; --r) {
    std::mt19937_64 again = rng;
    found = draw_problem(base, dt_, again, attrs, draw % 2 == 0, &p, err, big ? 8192 : 2048, r);
    if (found) rng = again;
  }
  if (!found) return false;
  *text = p.text(base);
  if (!backward_) {
    args->in.assign(p.in.size(), std::nullopt);
    for (size_t i = 0; i < p.in.size(); ++i)
      if (p.in[i]) args->in[i] = random_tensor(dt_, *p.in[i], rng);
    args->out.assign(p.out.size(), std::nullopt);
    for (size_t o = 0; o < p.out.size(); ++o) args->out[o] = poisoned_tensor(dt_, p.out[o]);
    args->alias.assign(p.out.size(), -1);
    args->attrs = p.attrs;
    return true;
  }
  return backward_args(reg_, dev_, dt_, fwd_, op_, p, rng, args, err);
}

bool Checker::check_runs(const std::string& name, const SchemaArgs& args, SchemaResult* first) {
  const int runs = std::max(1, opts_.repeats);
  for (int run = 0; run < runs; ++run) {
    const std::string when = "run " + std::to_string(run + 1) + "/" + std::to_string(runs);
    SchemaResult r = call(args, opts_.stale ? run : -1);
    if (!r.ran || r.status != DLFUSE_STATUS_OK) {
      add(false, name, when + ": call failed: " + r.message);
      return false;
    }
    CheckStats s;
    const double poison = round_to(kPoison, dt_);
    for (size_t o = 0; o < r.out.size(); ++o) {
      if (!r.out[o] || (o < args.alias.size() && args.alias[o] >= 0)) continue;
      check_outside_view(op_.schema.outputs[o].name, *r.out[o], *args.out[o], &s);
      for (int64_t i = 0; i < r.out[o]->numel() && !s.bad; ++i)
        if (r.out[o]->get(i) == poison)
          s.fail(std::string(op_.schema.outputs[o].name) + format_index(r.out[o]->shape(), i) + " never written");
    }
    for (size_t i = 0; i < r.in.size(); ++i) {
      bool aliased = false;
      for (int a : args.alias) aliased |= a == int(i);
      if (r.in[i] && !aliased) check_unchanged(op_.schema.inputs[i].name, *r.in[i], *args.in[i], &s);
    }
    if (s.bad) {
      add(false, name, when + ": " + s.first_bad);
      return false;
    }
    if (run == 0) {
      *first = std::move(r);
      continue;
    }
    if (!opts_.exact) continue;
    for (size_t o = 0; o < r.out.size(); ++o)
      if (r.out[o] && std::memcmp(r.out[o]->data(), first->out[o]->data(), r.out[o]->nbytes()) != 0) {
        add(false, name,
            when + (opts_.stale ? " on stale memory" : "") + ": output " + op_.schema.outputs[o].name +
                " not bit-identical to the first run (a kernel that cannot repeat itself says so with "
                "--nondeterministic)");
        return false;
      }
  }
  return true;
}

void Checker::check_against(const std::string& name, const SchemaArgs& args, const SchemaResult& got,
                            dlfuse_registry_t reg, DLDevice dev, DLDataType ref_dt, double factor,
                            const std::string& what) {
  if (!wanted(name)) return;
  SchemaOp ref_op;
  std::string err;
  if (!SchemaOp::lookup(reg, op_.name, &ref_op, &err)) return add(false, name, err);
  const SchemaResult ref = run_schema_call(reg, dev, ref_op, converted(args, ref_dt));
  if (!ref.ran || ref.status != DLFUSE_STATUS_OK) return add(false, name, what + " failed: " + ref.message);
  value_row(name, compare_outputs(got, ref, factor), "against " + what + " on the same rounded inputs");
}

void Checker::check_layouts(const SchemaArgs& args, const SchemaResult& base) {
  struct Kind {
    Layout layout;
    int64_t offset;
    const char* name;
  };
  const Kind kinds[] = {{Layout::kPadded, 0, "padded"},
                        {Layout::kTransposed, 0, "transposed"},
                        {Layout::kCompact, 5, "byte_offset"},
                        {Layout::kZeroStride, 0, "zero_stride"}};
  for (size_t i = 0; i < args.in.size(); ++i) {
    if (!args.in[i]) continue;
    const HostTensor& t = *args.in[i];
    for (const Kind& k : kinds) {
      const int rank = int(t.shape().size());
      if ((k.layout == Layout::kPadded || k.layout == Layout::kTransposed) && rank < 2) continue;
      if (k.layout == Layout::kZeroStride &&
          std::none_of(t.shape().begin(), t.shape().end(), [](int64_t d) { return d > 1; }))
        continue;
      const std::string name = prefix_ + "layout:" + op_.schema.inputs[i].name + ":" + k.name;
      if (!wanted(name)) continue;
      SchemaArgs a = args;
      HostTensor v = poisoned_tensor(dt_, t.shape(), k.layout, k.offset);
      for (int64_t e = 0; e < t.numel(); ++e) v.set(e, t.get(e));
      // A zero-stride view repeats its data: the compact call gets the same repeated values.
      SchemaArgs compact = args;
      compact.in[i] = converted(v, dt_, false);
      a.in[i] = v;
      const SchemaResult want = k.layout == Layout::kZeroStride ? call(compact) : base;
      const SchemaResult got = call(a);
      if (!got.ran || got.status != DLFUSE_STATUS_OK || !want.ran || want.status != DLFUSE_STATUS_OK) {
        add(false, name, "call failed: " + (got.ran && got.status == DLFUSE_STATUS_OK ? want.message : got.message));
        continue;
      }
      value_row(name, compare_outputs(got, want, 2.0), "equal to the compact input's call");
    }
  }
  for (size_t o = 0; o < args.out.size(); ++o) {
    if (!args.out[o] || args.out[o]->shape().size() < 2) continue;
    const std::string name = prefix_ + "layout:" + op_.schema.outputs[o].name + ":padded_offset";
    if (!wanted(name)) continue;
    SchemaArgs a = args;
    a.out[o] = poisoned_tensor(dt_, args.out[o]->shape(), Layout::kPadded, 3);
    const SchemaResult got = call(a);
    if (!got.ran || got.status != DLFUSE_STATUS_OK) {
      add(false, name, "call failed: " + got.message);
      continue;
    }
    CheckStats s = compare_outputs(got, base, 2.0);
    check_outside_view(op_.schema.outputs[o].name, *got.out[o], *a.out[o], &s);
    value_row(name, s, "a padded output at a byte offset: equal to the compact output, nothing written between rows");
  }
}

// An input of lower shape than the output it broadcasts into, against its materialized copy.
void Checker::check_broadcasts(const SchemaArgs& args, const SchemaResult& base) {
  for (size_t i = 0; i < args.in.size(); ++i) {
    if (!args.in[i]) continue;
    const std::string name = prefix_ + "broadcast:" + op_.schema.inputs[i].name;
    if (!wanted(name)) continue;
    for (size_t o = 0; o < args.out.size(); ++o) {
      const dlfuse_arg_schema_t& os = op_.schema.outputs[o];
      if (!args.out[o] || os.shape_rule != DLFUSE_SHAPE_BROADCAST || !(os.shape_inputs & (1u << i))) continue;
      const std::vector<int64_t>& full = args.out[o]->shape();
      if (args.in[i]->shape() == full) continue;
      // The input's values repeated to the output's shape.
      const HostTensor& t = *args.in[i];
      HostTensor m = poisoned_tensor(dt_, full);
      const size_t r = full.size(), ti = t.shape().size();
      for (int64_t e = 0; e < m.numel(); ++e) {
        int64_t rest = e, src = 0, stride = 1;
        for (size_t d = r; d-- > 0;) {
          const int64_t idx = rest % full[d];
          rest /= full[d];
          if (d + ti >= r) {
            const int64_t n = t.shape()[d + ti - r];
            src += (n == 1 ? 0 : idx) * stride;
            stride *= n;
          }
        }
        m.set(e, t.get(src));
      }
      SchemaArgs a = args;
      a.in[i] = m;
      std::vector<std::optional<std::vector<int64_t>>> shapes;
      for (const auto& x : a.in) shapes.push_back(x ? std::optional<std::vector<int64_t>>(x->shape()) : std::nullopt);
      std::vector<std::vector<int64_t>> outs;
      std::string err;
      if (!infer_output_shapes(op_, dt_, shapes, a.attrs, &outs, &err)) break;  // the op's rules need the broadcast
      bool same = true;
      for (size_t k = 0; k < outs.size(); ++k) same &= !a.out[k] || outs[k] == a.out[k]->shape();
      if (!same) break;
      const SchemaResult got = call(a);
      if (!got.ran || got.status != DLFUSE_STATUS_OK) {
        add(false, name, "materialized call failed: " + got.message);
        break;
      }
      value_row(name, compare_outputs(base, got, 2.0),
                shape_text(t.shape()) + " broadcast equals its copy at " + shape_text(full));
      break;
    }
  }
}

void Checker::check_in_place(const SchemaArgs& args, const SchemaResult& base) {
  for (size_t o = 0; o < args.out.size(); ++o) {
    const int a = op_.schema.outputs[o].alias_input;
    const std::string name = prefix_ + "in_place:" + op_.schema.outputs[o].name;
    if (a < 0 || !args.out[o] || size_t(a) >= args.in.size() || !args.in[size_t(a)] || !wanted(name)) continue;
    if (args.in[size_t(a)]->shape() != args.out[o]->shape()) continue;
    SchemaArgs s = args;
    s.alias[o] = a;
    const SchemaResult got = call(s);
    if (!got.ran || got.status != DLFUSE_STATUS_OK) {
      add(false, name, "call failed: " + got.message);
      continue;
    }
    value_row(name, compare_outputs(got, base, 2.0),
              std::string("written over ") + op_.schema.inputs[a].name + ": equal to a separate output");
  }
}

void Checker::check_absent_outputs(const SchemaArgs& args, const SchemaResult& base) {
  for (size_t o = 0; o < args.out.size(); ++o) {
    const std::string name = prefix_ + "absent:" + op_.schema.outputs[o].name;
    if (!(op_.schema.outputs[o].flags & DLFUSE_ARG_OPTIONAL) || !args.out[o] || !wanted(name)) continue;
    SchemaArgs a = args;
    a.out[o].reset();
    const SchemaResult got = call(a);
    if (!got.ran || got.status != DLFUSE_STATUS_OK) {
      add(false, name, "call without it failed: " + got.message);
      continue;
    }
    value_row(name, compare_outputs(got, base, 2.0), "the other outputs unchanged when it is NULL");
  }
}

void Checker::check_reducible(const SchemaArgs& args) {
  for (size_t o = 0; o < args.out.size(); ++o) {
    const dlfuse_arg_schema_t& os = op_.schema.outputs[o];
    const std::string name = prefix_ + "reducible:" + os.name;
    if (!(os.flags & DLFUSE_ARG_REDUCIBLE) || !args.out[o] || !wanted(name)) continue;
    // The widest shape the op accepts here, then the given one summed: every dim of the
    // widest that the given shape has as 1 or lacks.
    std::vector<std::optional<std::vector<int64_t>>> shapes;
    for (const auto& x : args.in) shapes.push_back(x ? std::optional<std::vector<int64_t>>(x->shape()) : std::nullopt);
    std::vector<std::vector<int64_t>> widest;
    std::string err;
    if (!infer_output_shapes(op_, dt_, shapes, args.attrs, &widest, &err)) {
      add(false, name, "inference refused the call: " + err);
      continue;
    }
    const std::vector<int64_t>& W = widest[o];
    std::vector<int64_t> R = args.out[o]->shape();
    if (R == W) {  // the call used the widest: reduce it to a broadcast of it
      for (size_t d = 0; d < R.size(); ++d)
        if (d % 2 == 0) R[d] = 1;
      if (R == W) continue;
    }
    SchemaArgs wide = args, narrow = args;
    wide.out[o] = poisoned_tensor(dt_, W);
    narrow.out[o] = poisoned_tensor(dt_, R);
    const SchemaResult gw = call(wide), gn = call(narrow);
    if (!gw.ran || gw.status != DLFUSE_STATUS_OK || !gn.ran || gn.status != DLFUSE_STATUS_OK) {
      add(false, name, "call failed: " + (gw.ran && gw.status == DLFUSE_STATUS_OK ? gn.message : gw.message));
      continue;
    }
    // Sum of the full-shape result into R, and the sum of each element's norm-wise bound.
    const Tolerance tol = tolerance_for(dt_);
    const std::vector<double> full = gw.out[o]->values();
    double big = 0.0;
    for (double v : full)
      if (std::isfinite(v)) big = std::max(big, std::fabs(v));
    const HostTensor& n = *gn.out[o];
    std::vector<double> sum(size_t(n.numel()), 0.0), bound(size_t(n.numel()), 0.0);
    const size_t r = W.size(), rn = R.size();
    for (size_t e = 0; e < full.size(); ++e) {
      int64_t rest = int64_t(e), dst = 0, stride = 1;
      for (size_t d = r; d-- > 0;) {
        const int64_t idx = rest % W[d];
        rest /= W[d];
        if (d + rn >= r) {
          const int64_t k = R[d + rn - r];
          dst += (k == 1 ? 0 : idx) * stride;
          stride *= k;
        }
      }
      sum[size_t(dst)] += full[e];
      bound[size_t(dst)] += 2 * (tol.atol + tol.rtol * (std::fabs(full[e]) + big));
    }
    CheckStats s;
    for (int64_t e = 0; e < n.numel(); ++e) {
      ++s.checked;
      const double err2 = std::fabs(n.get(e) - sum[size_t(e)]);
      s.max_abs = std::max(s.max_abs, err2);
      s.max_ratio = std::max(s.max_ratio, err2 / bound[size_t(e)]);
      if (!(err2 <= bound[size_t(e)]))
        s.fail(std::string(os.name) + format_index(R, e) + ": got " + num(n.get(e)) + ", the sum of the " +
               shape_text(W) + " result is " + num(sum[size_t(e)]));
    }
    value_row(name, s, shape_text(R) + " equals the " + shape_text(W) + " result summed");
  }
}

void Checker::check_threads(const std::vector<SchemaArgs>& calls) {
  const std::string name = "threads:x" + std::to_string(opts_.threads);
  if (opts_.threads < 2 || !opts_.exact || calls.empty() || !wanted(name)) return;
  std::vector<SchemaResult> alone;
  for (const SchemaArgs& a : calls) alone.push_back(call(a));
  std::vector<std::string> errors(static_cast<size_t>(opts_.threads));
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  // At least 64 rounds of the calls and 200 ms: a race needs the calls to overlap, which a
  // loaded machine's scheduler makes rare in any few milliseconds.
  const int iterations = 64 * int(calls.size());
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (int t = 0; t < opts_.threads; ++t)
    pool.emplace_back([&, t] {
      // Every thread starts at once, so that the calls overlap.
      ready.fetch_add(1);
      while (ready.load() < opts_.threads) std::this_thread::yield();
      for (int it = 0; it < iterations || std::chrono::steady_clock::now() < until; ++it) {
        const size_t c = size_t(t + it) % calls.size();
        const SchemaResult r = call(calls[c]);
        if (!r.ran || r.status != DLFUSE_STATUS_OK) {
          errors[size_t(t)] = "call failed: " + r.message;
          return;
        }
        for (size_t o = 0; o < r.out.size(); ++o)
          if (r.out[o] && std::memcmp(r.out[o]->data(), alone[c].out[o]->data(), r.out[o]->nbytes()) != 0) {
            errors[size_t(t)] = "thread " + std::to_string(t) + ", call " + std::to_string(c) + ": output " +
                                op_.schema.outputs[o].name + " differs from the same call run alone";
            return;
          }
      }
    });
  for (std::thread& th : pool) th.join();
  for (const std::string& e : errors)
    if (!e.empty()) return add(false, name, e);
  add(true, name,
      std::to_string(calls.size()) + " calls, each at least " + std::to_string(iterations / int(calls.size())) +
          " times from each of " + std::to_string(opts_.threads) +
          " threads at once for 200 ms or more, bit-identical to each run alone");
}

std::vector<SchemaRow> Checker::run(const std::string& name) {
  std::string err;
  if (!SchemaOp::lookup(reg_, name, &op_, &err)) return add(false, "schema", err), rows_;
  const std::string suffix = "_backward";
  backward_ = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
              SchemaOp::lookup(reg_, name.substr(0, name.size() - suffix.size()), &fwd_, &err);
  const DLDataType f64{kDLFloat, 64, 1}, f32{kDLFloat, 32, 1};
  const bool is_low = !same_dtype(dt_, f64) && !same_dtype(dt_, f32);
  DLDataType ref_dt = f64;
  const bool has_ref_dtype = !same_dtype(dt_, f64) && (serves(op_, f64, dev_.device_type) ||
                                                       (is_low && serves(op_, (ref_dt = f32), dev_.device_type)));
  if (backward_ && (same_dtype(dt_, f64) || (same_dtype(dt_, f32) && !serves(op_, f64, dev_.device_type))))
    for (int draw = 0; draw < opts_.draws; ++draw) {
      const std::string cname = "gradcheck:" + std::to_string(draw);
      if (!wanted(cname)) continue;
      const GradOutcome g = gradient_check(reg_, dev_, dt_, fwd_, op_, opts_.seed * 7919u + uint64_t(draw), draw);
      add(SchemaRow{g.pass, cname, g.max_abs, g.ratio, g.detail});
    }
  std::vector<SchemaArgs> staged;
  for (int draw = 0; draw < opts_.draws; ++draw) {
    const std::string cname = "draw:" + std::to_string(draw);
    SchemaArgs args;
    std::string text;
    if (!make_args(draw, &args, &text, &err)) {
      add(false, cname, "setup: " + err);
      continue;
    }
    SchemaResult first;
    if (wanted(cname)) {
      if (!check_runs(cname, args, &first)) continue;
      add(true, cname,
          text + ": " + std::to_string(std::max(1, opts_.repeats)) + " runs" + (opts_.stale ? " on stale memory" : "") +
              (opts_.exact ? ", bit-identical" : ""));
    } else {
      first = call(args);
      if (!first.ran || first.status != DLFUSE_STATUS_OK) continue;
    }
    staged.push_back(args);
    if (has_ref_dtype)
      check_against(cname + ":vs_" + dtype_name(ref_dt), args, first, reg_, dev_, ref_dt, 1.0,
                    "the plugin's own " + dtype_name(ref_dt) + " kernel");
    if (opts_.reference)
      check_against(cname + ":vs_reference", args, first, opts_.reference, DLDevice{kDLCPU, 0}, f64, 1.0,
                    "the reference plugin's float64 kernel");
    if (draw > 1) continue;  // the structural checks on draw 0 (defaults) and 1 (drawn attributes)
    prefix_ = draw == 0 ? "" : cname + ":";
    check_layouts(args, first);
    check_broadcasts(args, first);
    check_in_place(args, first);
    check_absent_outputs(args, first);
    check_reducible(args);
    if (opts_.bad_inputs && draw == 0)
      for (SchemaRow& r : bad_schema_calls(reg_, dev_, op_, args))
        if (wanted(r.name)) add(std::move(r));
  }
  SchemaArgs big;
  std::string text;
  if (opts_.threads >= 2 && make_args(opts_.draws, &big, &text, &err)) staged.push_back(std::move(big));
  check_threads(staged);
  return rows_;
}

}  // namespace

std::vector<SchemaRow> check_schema_kernel(dlfuse_registry_t reg, const std::string& op, DLDataType dt, DLDevice dev,
                                           const SchemaCheckOptions& opts) {
  return Checker(reg, dt, dev, opts).run(op);
}

}  // namespace dlfuse_conformance
