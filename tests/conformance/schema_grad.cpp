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
  dlfuse_status_t st = dlfuse_op_backward_plan(fwd.handle, p.attrs.data(), int32_t(p.attrs.size()), dev.device_type,
                                               dt, &handle, &keep, &write);
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
    if (fi >= 0 && f.in[size_t(fi)]) args->in[size_t(i)] = f.in[size_t(fi)];
    else if (fo >= 0 && fr.out[size_t(fo)]) args->in[size_t(i)] = fr.out[size_t(fo)];
  }
  args->attrs = default_attrs(bs);
  for (int a = 0; a < bs.num_attrs; ++a)
    for (int k = 0; k < fwd.schema.num_attrs; ++k)
      if (std::string(bs.attrs[a].name) == fwd.schema.attrs[k].name) args->attrs[size_t(a)] = p.attrs[size_t(k)];
  std::vector<std::optional<std::vector<int64_t>>> shapes;
  for (const auto& t : args->in) shapes.push_back(t ? std::optional<std::vector<int64_t>>(t->shape()) : std::nullopt);
  std::vector<std::vector<int64_t>> inferred;
  if (!infer_output_shapes(bwd, dt, shapes, args->attrs, &inferred, err)) return *err = "backward inference: " + *err, false;
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

struct Step {
  double d = 0, noise = 0;  // central differences minus the backward's value, and its rounding
};

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(4);
  s << v;
  return s.str();
}

}  // namespace

GradOutcome gradient_check(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const SchemaOp& fwd,
                           const SchemaOp& bwd, uint64_t seed, int draw) {
  GradOutcome g;
  const bool f64 = same_dtype(dt, DLDataType{kDLFloat, 64, 1});
  const double h0 = std::ldexp(1.0, f64 ? -10 : -6);
  std::string why = "no draw";
  for (int attempt = 0; attempt < 6; ++attempt) {
    std::mt19937_64 rng(seed * 6364136223846793005ull + uint64_t(attempt));
    const std::vector<dlfuse_attr_t> attrs = draw == 0 ? default_attrs(fwd.schema) : random_attrs(fwd.schema, rng);
    Problem p;
    std::string err;
    if (!draw_problem(fwd, dt, rng, attrs, draw % 2 == 0, &p, &err, 64)) return g.detail = "setup: " + err, g;
    SchemaArgs b, f;
    if (!backward_args(reg, dev, dt, fwd, bwd, p, rng, &b, &err, &f)) return g.detail = "setup: " + err, g;
    const SchemaResult br = run_schema_call(reg, dev, bwd, b);
    if (!br.ran || br.status != DLFUSE_STATUS_OK) return g.detail = "backward call failed: " + br.message, g;
    // The direction: every forward input the backward returns a gradient for.
    std::vector<int> grad_of(f.in.size(), -1);
    std::vector<std::vector<double>> v(f.in.size()), gv(f.in.size());
    double mag = 0.0;
    for (size_t i = 0; i < f.in.size(); ++i) {
      const int o = bwd.output(std::string("grad_") + fwd.schema.inputs[i].name);
      if (!f.in[i] || o < 0 || !br.out[size_t(o)]) continue;
      grad_of[i] = o;
      gv[i] = br.out[size_t(o)]->values();
      v[i].resize(gv[i].size());
      for (size_t e = 0; e < v[i].size(); ++e) {
        v[i][e] = std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
        mag += std::fabs(gv[i][e] * v[i][e]);
      }
    }
    const std::vector<double> w = b.in[0]->values();
    SchemaArgs f0 = f;  // only the first output is differentiated
    for (size_t o = 1; o < f0.out.size(); ++o)
      if (fwd.schema.outputs[o].flags & DLFUSE_ARG_OPTIONAL) f0.out[o].reset();
    Step steps[3];
    bool failed = false;
    for (int s = 0; s < 3 && !failed; ++s) {
      const double h = h0 / double(1 << s);
      SchemaArgs plus = f0, minus = f0;
      double analytic = 0.0, noise = 0.0;
      for (size_t i = 0; i < f.in.size(); ++i) {
        if (grad_of[i] < 0) continue;
        const std::vector<double> x = f.in[i]->values(), gr = rounding(gv[i], dt);
        for (size_t e = 0; e < x.size(); ++e) {
          plus.in[i]->set(int64_t(e), x[e] + h * v[i][e]);
          minus.in[i]->set(int64_t(e), x[e] - h * v[i][e]);
          const double delta = plus.in[i]->get(int64_t(e)) - minus.in[i]->get(int64_t(e));
          analytic += gv[i][e] * delta / (2 * h);
          noise += gr[e] * std::fabs(delta) / (2 * h);
        }
      }
      const SchemaResult rp = run_schema_call(reg, dev, fwd, plus), rm = run_schema_call(reg, dev, fwd, minus);
      if (!rp.ran || rp.status != DLFUSE_STATUS_OK || !rm.ran || rm.status != DLFUSE_STATUS_OK) {
        g.detail = "forward call failed: " + (rp.ran && rp.status == DLFUSE_STATUS_OK ? rm.message : rp.message);
        failed = true;
        break;
      }
      const std::vector<double> fp = rp.out[0]->values(), fm = rm.out[0]->values();
      const std::vector<double> np = rounding(fp, dt), nm = rounding(fm, dt);
      double fd = 0.0;
      for (size_t k = 0; k < w.size(); ++k) {
        fd += w[k] * (fp[k] - fm[k]) / (2 * h);
        noise += std::fabs(w[k]) * (np[k] + nm[k]) / (2 * h);
      }
      steps[s] = Step{fd - analytic, noise};
    }
    if (failed) return g;
    const double d1 = std::fabs(steps[0].d - steps[1].d), d2 = std::fabs(steps[1].d - steps[2].d);
    const double extrapolated = (4 * steps[1].d - steps[0].d) / 3;
    const double bound = 2 * d1 + (4 * steps[1].noise + steps[0].noise) / 3;
    const bool smooth = d2 <= 0.3 * d1 + steps[1].noise + steps[2].noise;
    if (!(mag > 0) || !smooth || bound > 0.05 * mag) {
      why = !(mag > 0) ? "every gradient was 0 along the direction"
                       : !smooth ? "not smooth within the steps (a kink between x - h v and x + h v)"
                                 : "bound " + fmt(bound) + " over 5% of sum |grad v| " + fmt(mag);
      continue;
    }
    g.max_abs = std::fabs(extrapolated);
    g.ratio = bound > 0 ? g.max_abs / bound : (g.max_abs > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    g.pass = g.max_abs <= bound;
    std::string text = p.text(fwd);
    g.detail = std::string(g.pass ? "" : "the backward disagrees with the forward's central differences: ") + text +
               ": <grad_out, J v> - <grad_x, v> = " + fmt(extrapolated) + " (bound " + fmt(bound) +
               ", sum |grad_x v| " + fmt(mag) + ", steps " + fmt(h0) + ", " + fmt(h0 / 2) + ", " + fmt(h0 / 4) +
               (attempt ? ", draw " + std::to_string(attempt + 1) + " of 6" : "") + ")";
    return g;
  }
  g.detail = "gradient check inconclusive in 6 draws; last: " + why;
  return g;
}

}  // namespace dlfuse_conformance
