#include "schema_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "device.h"
#include "dtypes.h"
#include "schema_checks.h"

namespace dlfuse_conformance {

bool backward_args(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const SchemaOp& fwd, const SchemaOp& bwd,
                   const Problem& p, std::mt19937_64& rng, SchemaArgs* args, std::string* err, SchemaArgs* fwd_args) {
  SchemaArgs f;
  f.in.assign(p.in.size(), std::nullopt);
  for (size_t i = 0; i < p.in.size(); ++i)
    if (p.in[i]) f.in[i] = random_tensor(dt, *p.in[i], rng);
  f.attrs = p.attrs;
  dlfuse_op_t handle = nullptr;
  uint32_t keep = 0, write = 0;
  dlfuse_status_t st = dlfuse_op_backward_plan(fwd.handle, p.attrs.data(), int32_t(p.attrs.size()), dev.device_type, dt,
                                               &handle, &keep, &write);
  if (st != DLFUSE_STATUS_OK) return *err = "backward plan: " + describe_failure(st), false;
  f.out.assign(p.out.size(), std::nullopt);
  for (size_t o = 0; o < p.out.size(); ++o)
    if (write & (1u << o)) f.out[o] = poisoned_tensor(dt, p.out[o]);
  f.alias.assign(p.out.size(), -1);
  const SchemaResult fr = run_schema_call(reg, dev, fwd, f);
  if (!fr.ran || fr.status != DLFUSE_STATUS_OK) return *err = "forward call: " + fr.message, false;

  const dlfuse_op_schema_t& bs = bwd.schema;
  args->in.assign(size_t(bs.num_inputs), std::nullopt);
  args->in[0] = random_tensor(dt, p.out[0], rng);
  for (int i = 1; i < bs.num_inputs; ++i) {
    if (!(keep & (1u << i))) continue;
    const int fi = fwd.input(bs.inputs[i].name), fo = fwd.output(bs.inputs[i].name);
    if (fi >= 0 && f.in[size_t(fi)])
      args->in[size_t(i)] = f.in[size_t(fi)];
    else if (fo >= 0 && fr.out[size_t(fo)])
      args->in[size_t(i)] = fr.out[size_t(fo)];
  }
  args->attrs = default_attrs(bs);
  for (int a = 0; a < bs.num_attrs; ++a)
    for (int k = 0; k < fwd.schema.num_attrs; ++k)
      if (std::string(bs.attrs[a].name) == fwd.schema.attrs[k].name) args->attrs[size_t(a)] = p.attrs[size_t(k)];
  std::vector<std::optional<std::vector<int64_t>>> shapes;
  for (const auto& t : args->in) shapes.push_back(t ? std::optional<std::vector<int64_t>>(t->shape()) : std::nullopt);
  std::vector<std::vector<int64_t>> inferred;
  if (!infer_output_shapes(bwd, dt, shapes, args->attrs, &inferred, err))
    return *err = "backward inference: " + *err, false;
  args->out.assign(size_t(bs.num_outputs), std::nullopt);
  args->alias.assign(size_t(bs.num_outputs), -1);
  for (int o = 0; o < bs.num_outputs; ++o) {
    const std::string name = bs.outputs[o].name;
    const int fi = name.rfind("grad_", 0) == 0 ? fwd.input(name.substr(5)) : -1;
    if (fi >= 0 && !f.in[size_t(fi)]) continue;  // the gradient of an absent input
    args->out[size_t(o)] = poisoned_tensor(dt, fi >= 0 ? f.in[size_t(fi)]->shape() : inferred[size_t(o)]);
  }
  if (fwd_args) *fwd_args = std::move(f);
  return true;
}

namespace {

// 32 units in the last place of the norm-wise magnitude |y| + max |y|: the rounding the
// check allows each computed element.
std::vector<double> rounding(const std::vector<double>& y, DLDataType dt) {
  const double ulp = same_dtype(dt, DLDataType{kDLFloat, 64, 1}) ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
  double big = 0.0;
  for (double v : y) big = std::max(big, std::fabs(v));
  std::vector<double> r(y.size());
  for (size_t i = 0; i < y.size(); ++i) r[i] = 32 * ulp * (std::fabs(y[i]) + big);
  return r;
}

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(4);
  s << v;
  return s.str();
}

}  // namespace

GradOutcome gradient_check(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const SchemaOp& fwd, const SchemaOp& bwd,
                           uint64_t seed, int draw) {
  GradOutcome g;
  const bool f64 = same_dtype(dt, DLDataType{kDLFloat, 64, 1});
  const double h0 = std::ldexp(1.0, f64 ? -10 : -8);
  constexpr int kSteps = 3;
  std::string why = "no draw";
  for (int attempt = 0; attempt < 6; ++attempt) {
    std::mt19937_64 rng(seed * 6364136223846793005ull + uint64_t(attempt));
    const std::vector<dlfuse_attr_t> attrs = draw == 0 ? default_attrs(fwd.schema) : random_attrs(fwd.schema, rng);
    Problem p;
    std::string err;
    if (!draw_problem(fwd, dt, rng, attrs, draw % 2 == 0, &p, &err, 64)) return g.detail = "setup: " + err, g;
    SchemaArgs b, f;
    if (!backward_args(reg, dev, dt, fwd, bwd, p, rng, &b, &err, &f)) return g.detail = "setup: " + err, g;
    const int64_t K = b.in[0]->numel();
    // The forward inputs the backward returns a gradient for, and the direction along them.
    std::vector<int> grad_of(f.in.size(), -1);
    std::vector<std::vector<double>> v(f.in.size());
    for (size_t i = 0; i < f.in.size(); ++i) {
      const int o = bwd.output(std::string("grad_") + fwd.schema.inputs[i].name);
      if (!f.in[i] || o < 0 || !b.out[size_t(o)]) continue;
      grad_of[i] = o;
      v[i].resize(size_t(f.in[i]->numel()));
      for (double& e : v[i]) e = std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
    }
    // Row k of the Jacobian of the first output: the backward at grad_out = e_k.
    std::vector<std::vector<std::vector<double>>> row(static_cast<size_t>(K),
                                                      std::vector<std::vector<double>>(f.in.size()));
    std::vector<std::vector<std::vector<double>>> row_round = row;
    for (int64_t k = 0; k < K; ++k) {
      SchemaArgs bk = b;
      for (int64_t e = 0; e < K; ++e) bk.in[0]->set(e, e == k ? 1.0 : 0.0);
      const SchemaResult br = run_schema_call(reg, dev, bwd, bk);
      if (!br.ran || br.status != DLFUSE_STATUS_OK) return g.detail = "backward call failed: " + br.message, g;
      for (size_t i = 0; i < f.in.size(); ++i)
        if (grad_of[i] >= 0) {
          row[size_t(k)][i] = br.out[size_t(grad_of[i])]->values();
          row_round[size_t(k)][i] = rounding(row[size_t(k)][i], dt);
        }
    }
    SchemaArgs f0 = f;  // only the first output is differentiated
    for (size_t o = 1; o < f0.out.size(); ++o)
      if (fwd.schema.outputs[o].flags & DLFUSE_ARG_OPTIONAL) f0.out[o].reset();
    // Per element k and step s: central differences minus the backward's value, and its rounding.
    std::vector<std::vector<double>> d(static_cast<size_t>(K), std::vector<double>(kSteps));
    std::vector<std::vector<double>> noise = d;
    std::vector<double> mag(static_cast<size_t>(K), 0.0);
    for (int s = 0; s < kSteps; ++s) {
      const double h = h0 / double(1 << s);
      SchemaArgs plus = f0, minus = f0;
      std::vector<std::vector<double>> delta(f.in.size());
      for (size_t i = 0; i < f.in.size(); ++i) {
        if (grad_of[i] < 0) continue;
        const std::vector<double> x = f.in[i]->values();
        delta[i].resize(x.size());
        for (size_t e = 0; e < x.size(); ++e) {
          plus.in[i]->set(int64_t(e), x[e] + h * v[i][e]);
          minus.in[i]->set(int64_t(e), x[e] - h * v[i][e]);
          delta[i][e] = plus.in[i]->get(int64_t(e)) - minus.in[i]->get(int64_t(e));
        }
      }
      const SchemaResult rp = run_schema_call(reg, dev, fwd, plus), rm = run_schema_call(reg, dev, fwd, minus);
      if (!rp.ran || rp.status != DLFUSE_STATUS_OK || !rm.ran || rm.status != DLFUSE_STATUS_OK)
        return g.detail = "forward call failed: " + (rp.ran && rp.status == DLFUSE_STATUS_OK ? rm.message : rp.message),
               g;
      const std::vector<double> fp = rp.out[0]->values(), fm = rm.out[0]->values();
      const std::vector<double> np = rounding(fp, dt), nm = rounding(fm, dt);
      for (int64_t k = 0; k < K; ++k) {
        double analytic = 0.0, n = (np[size_t(k)] + nm[size_t(k)]) / (2 * h);
        for (size_t i = 0; i < f.in.size(); ++i)
          for (size_t e = 0; e < delta[i].size(); ++e) {
            analytic += row[size_t(k)][i][e] * delta[i][e] / (2 * h);
            n += row_round[size_t(k)][i][e] * std::fabs(delta[i][e]) / (2 * h);
            if (s == 0) mag[size_t(k)] += std::fabs(row[size_t(k)][i][e] * v[i][e]);
          }
        d[size_t(k)][size_t(s)] = (fp[size_t(k)] - fm[size_t(k)]) / (2 * h) - analytic;
        noise[size_t(k)][size_t(s)] = n;
      }
    }
    // Each element: Richardson's extrapolation of h and h/2 against twice their difference
    // plus the rounding; smooth where h/4 shrinks the difference as h^2 does (a kink within
    // the steps does not); conclusive where that bound is under 5% of sum_j |J_kj v_j|.
    int64_t conclusive = 0, flat = 0, bad = 0;
    double worst = 0.0, worst_abs = 0.0;
    std::string first_bad;
    for (int64_t k = 0; k < K; ++k) {
      const std::vector<double>& dk = d[size_t(k)];
      const std::vector<double>& nk = noise[size_t(k)];
      const double d1 = std::fabs(dk[0] - dk[1]), d2 = std::fabs(dk[1] - dk[2]);
      const double extrapolated = (4 * dk[1] - dk[0]) / 3, bound = 2 * d1 + (4 * nk[1] + nk[0]) / 3;
      const double fd = dk[1] + 0.0;  // central differences minus backward at h/2
      if (mag[size_t(k)] == 0.0 && std::fabs(extrapolated) <= bound) {
        ++flat;  // locally constant: both sides 0
        continue;
      }
      if (!(d2 <= 0.3 * d1 + nk[1] + nk[2])) continue;  // a kink within the steps
      if (bound > 0.05 * std::max(mag[size_t(k)], std::fabs(fd))) continue;
      ++conclusive;
      const double ratio = bound > 0 ? std::fabs(extrapolated) / bound : std::numeric_limits<double>::infinity();
      if (ratio > worst) worst = ratio, worst_abs = std::fabs(extrapolated);
      if (!(std::fabs(extrapolated) <= bound) && bad++ == 0)
        first_bad = "element " + std::to_string(k) + " of " + fwd.schema.outputs[0].name +
                    ": (J v)_k by central differences minus by the backward = " + fmt(extrapolated) + " (bound " +
                    fmt(bound) + ", sum_j |J_kj v_j| " + fmt(mag[size_t(k)]) + ")";
    }
    if (bad == 0 && (conclusive == 0 || 2 * conclusive < K - flat)) {
      why = std::to_string(conclusive) + " of " + std::to_string(K - flat) +
            " elements conclusive (the others within a kink of the steps, or too noisy)";
      continue;
    }
    g.pass = bad == 0;
    g.max_abs = worst_abs;
    g.ratio = worst;
    const std::string steps = "steps " + fmt(h0) + ", " + fmt(h0 / 2) + ", " + fmt(h0 / 4) +
                              (attempt ? ", draw " + std::to_string(attempt + 1) + " of 6" : "");
    g.detail =
        g.pass ? p.text(fwd) + ": " + std::to_string(conclusive) + " of " + std::to_string(K) +
                     " elements of J v agree with the backward (" + std::to_string(flat) + " flat; " + steps + ")"
               : "the backward disagrees with the forward's central differences at " + std::to_string(bad) + " of " +
                     std::to_string(conclusive) + " elements, " + p.text(fwd) + "; first: " + first_bad + "; " + steps;
    return g;
  }
  g.detail = "gradient check inconclusive in 6 draws; last: " + why;
  return g;
}

}  // namespace dlfuse_conformance
