#include "mlp_cases.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "check.h"
#include "device.h"
#include "dtypes.h"
#include "host_tensor.h"
#include "reference.h"

namespace dlfuse_conformance {
namespace {

constexpr int kLayers = 7;

struct MlpCase {
  std::string name;
  int64_t M = 4;
  std::vector<int64_t> widths;  // x's K, then each layer's N
  int act = DLFUSE_ACT_RELU, out_act = DLFUSE_ACT_IDENTITY;
  bool w_transposed = false;      // weights as column-major views (an nn.Linear weight's .t())
  bool empty_unused = false;      // the unused layers' tensors as [0] instead of NULL
  bool pass_out = true;           // backward: out given (it must be unless out_act is IDENTITY)
  std::vector<std::string> only;  // backward: the gradients asked for (empty: all)
  bool hidden_not_kept = false;   // forward: h0..h5 NULL (the plugin keeps them itself)
  bool float32_only = false;      // data exact in float32 only
  int layers() const { return int(widths.size()) - 1; }
};

MlpCase mc(std::string name, int64_t M, std::vector<int64_t> widths, int act = DLFUSE_ACT_RELU,
           int out_act = DLFUSE_ACT_IDENTITY) {
  MlpCase c;
  c.name = std::move(name);
  c.M = M;
  c.widths = std::move(widths);
  c.act = act;
  c.out_act = out_act;
  return c;
}

template <class F>
MlpCase with(MlpCase c, F f) {
  f(c);
  return c;
}

std::vector<MlpCase> forward_cases() {
  return {
      mc("one_layer", 5, {3, 4}),
      mc("three_layers_sigmoid_out", 7, {5, 8, 6, 3}, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID),
      mc("seven_layers_tanh", 4, {3, 4, 5, 4, 3, 4, 5, 2}, DLFUSE_ACT_TANH),
      mc("gelu_hidden_silu_out", 6, {4, 6, 5, 2}, DLFUSE_ACT_GELU_TANH, DLFUSE_ACT_SILU),
      mc("k13_n1", 33, {13, 16, 8, 1}),
      with(mc("weights_transposed", 9, {6, 7, 5}), [](MlpCase& c) { c.w_transposed = true; }),
      with(mc("unused_as_empty", 5, {3, 4, 2}), [](MlpCase& c) { c.empty_unused = true; }),
      mc("zero_rows", 0, {3, 4, 2}),
      mc("many_rows", 1024, {16, 32, 8, 1}),
      with(mc("hidden_not_kept", 6, {4, 5, 6, 3}, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID),
           [](MlpCase& c) { c.hidden_not_kept = true; }),
      with(mc("hidden_not_kept_many_rows", 1024, {16, 32, 8, 1}), [](MlpCase& c) { c.hidden_not_kept = true; }),
  };
}

std::vector<MlpCase> backward_cases() {
  return {
      with(mc("one_layer", 5, {3, 4}), [](MlpCase& c) { c.pass_out = false; }),
      mc("three_layers_sigmoid_out", 7, {5, 8, 6, 3}, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID),
      mc("tanh_out_identity_hidden", 6, {4, 5, 3}, DLFUSE_ACT_IDENTITY, DLFUSE_ACT_TANH),
      mc("seven_layers", 4, {3, 4, 5, 4, 3, 4, 5, 2}),
      mc("k13_n1", 33, {13, 16, 8, 1}),
      with(mc("weights_transposed", 9, {6, 7, 5}), [](MlpCase& c) { c.w_transposed = true; }),
      with(mc("unused_as_empty", 5, {3, 4, 2}), [](MlpCase& c) { c.empty_unused = true; }),
      with(mc("only_grad_w0", 6, {4, 5, 3, 2}), [](MlpCase& c) { c.only = {"grad_w0"}; }),
      with(mc("only_top_layer", 6, {4, 5, 3, 2}),
           [](MlpCase& c) {
             c.only = {"grad_w2", "grad_b2"};
           }),
      with(mc("only_grad_x", 6, {4, 5, 3}), [](MlpCase& c) { c.only = {"grad_x"}; }),
      with(mc("sigmoid_hidden", 5, {4, 6, 3}, DLFUSE_ACT_SIGMOID), [](MlpCase& c) { c.float32_only = true; }),
      mc("zero_rows", 0, {3, 4, 2}),
      mc("many_rows", 1024, {16, 32, 8, 1}),
      // Widths of 8n (64n: the bias gradient from the GEMM's own column sums) and rows no
      // tile divides: the CUDA plugin's fused input-gradient epilogue.
      mc("widths_of_8n", 300, {24, 72, 40, 16}),
      with(mc("widths_of_8n_transposed", 300, {24, 72, 40, 16}), [](MlpCase& c) { c.w_transposed = true; }),
      with(mc("widths_of_64n_transposed", 300, {24, 128, 64, 16}), [](MlpCase& c) { c.w_transposed = true; }),
      // A 1-wide top layer over tanh: its input gradient is an outer product.
      mc("one_wide_top_tanh", 50, {6, 9, 1}, DLFUSE_ACT_TANH),
      // ... over a layer wider than one block's columns (more than 2048).
      mc("one_wide_top_wide", 12, {8, 2056, 1}),
  };
}

// One tensor of a call: host values, its device copy and the view passed.
struct Arg {
  std::string role;
  HostTensor host;
  DeviceBuffer buf;
  std::vector<int64_t> shape, strides;
  DLTensor dl{};
};

class Call {
 public:
  Call(dlfuse_registry_t reg, DLDevice dev, DLDataType dt) : reg_(reg), dev_(dev), dt_(dt) {}
  Arg* add(const std::string& role, std::vector<int64_t> shape, Layout layout = Layout::kCompact) {
    args_.push_back(std::make_unique<Arg>());
    Arg& a = *args_.back();
    a.role = role;
    a.host = HostTensor(dt_, std::move(shape), layout, 0);
    return &a;
  }
  bool place(Arg* a, std::string* err) {
    a->shape = a->host.shape();
    a->strides = a->host.strides();
    if (!a->buf.allocate(reg_, dev_, a->host.nbytes(), err) || !a->buf.upload(a->host.data(), a->host.nbytes(), err))
      return false;
    a->dl = DLTensor{a->buf.ptr(),
                     dev_,
                     int32_t(a->shape.size()),
                     dt_,
                     a->shape.data(),
                     a->host.null_strides() ? nullptr : a->strides.data(),
                     uint64_t(a->host.byte_offset())};
    return true;
  }
  bool download(Arg* a, HostTensor* got, std::string* err) const {
    *got = a->host;
    return a->buf.download(got->data(), got->nbytes(), err, false);
  }

 private:
  dlfuse_registry_t reg_;
  DLDevice dev_;
  DLDataType dt_;
  std::vector<std::unique_ptr<Arg>> args_;
};

Dense dense(const HostTensor& h) { return Dense{h.shape(), h.values()}; }

// A case's outcome from its checks.
MlpOutcome finish(MlpOutcome o, const CheckStats& s, int layers) {
  o.max_abs = s.max_abs;
  o.max_ratio = s.max_ratio;
  o.pass = s.bad == 0;
  o.detail = o.pass
                 ? std::to_string(s.checked) + " elements, " + std::to_string(layers) + " layers"
                 : std::to_string(s.bad) + " of " + std::to_string(s.checked) + " elements bad; first: " + s.first_bad;
  return o;
}

// A case's data: seeded by the run's seed, the op, the case and the dtype.
std::mt19937_64 case_rng(const char* op, const MlpCase& c, DLDataType dt, uint64_t seed) {
  return std::mt19937_64(seed ^ std::hash<std::string>()(std::string(op) + "/" + c.name + "/" + dtype_name(dt)));
}

// Calls op by name; false with o->detail on a failed call or readback.
bool invoke(dlfuse_registry_t reg, DLDevice dev, const char* op, const std::vector<const DLTensor*>& in,
            const std::vector<DLTensor*>& out, const MlpCase& c, MlpOutcome* o) {
  dlfuse_op_t h = nullptr;
  dlfuse_status_t st = dlfuse_op_get(reg, op, &h);
  const dlfuse_attr_t attrs[2] = {{DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_INT64, {c.act}},
                                  {DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ATTR_INT64, {c.out_act}}};
  if (st == DLFUSE_STATUS_OK)
    st = dlfuse_op_call(h, in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), attrs, 2, nullptr);
  if (st == DLFUSE_STATUS_OK) st = dlfuse_device_synchronize(reg, dev, nullptr);
  if (st != DLFUSE_STATUS_OK) o->detail = std::string("call failed: ") + describe_failure(st);
  return st == DLFUSE_STATUS_OK;
}

Layout weight_layout(const MlpCase& c) { return c.w_transposed ? Layout::kTransposed : Layout::kCompact; }

// An unused layer's tensor: NULL, or an empty [0] one.
DLTensor* unused(Call& call, const MlpCase& c, const std::string& role, std::string* err) {
  if (!c.empty_unused) return nullptr;
  Arg* a = call.add(role, {0});
  return call.place(a, err) ? &a->dl : nullptr;
}

MlpOutcome run_forward(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const MlpCase& c, uint64_t seed) {
  MlpOutcome o;
  o.name = c.name;
  std::mt19937_64 rng = case_rng(DLFUSE_OP_MLP, c, dt, seed);
  const int L = c.layers();
  Call call(reg, dev, dt);
  std::string err;
  Arg* x = call.add("x", {c.M, c.widths[0]});
  std::vector<Arg*> w, b, outs;
  x->host.fill_random(rng, -1, 1);
  for (int i = 0; i < L; ++i) {
    w.push_back(call.add("w" + std::to_string(i), {c.widths[i], c.widths[i + 1]}, weight_layout(c)));
    b.push_back(call.add("b" + std::to_string(i), {c.widths[i + 1]}));
    w.back()->host.fill_random(rng, -1, 1);
    b.back()->host.fill_random(rng, -1, 1);
    outs.push_back(call.add(i == L - 1 ? "out" : "h" + std::to_string(i), {c.M, c.widths[i + 1]}));
    outs.back()->host.fill_buffer(kPoison);
  }
  std::vector<const DLTensor*> in(1 + 2 * kLayers, nullptr);
  std::vector<DLTensor*> out(kLayers, nullptr);
  bool ok = call.place(x, &err);
  in[0] = &x->dl;
  for (int i = 0; i < L && ok; ++i) {
    ok = call.place(w[size_t(i)], &err) && call.place(b[size_t(i)], &err) && call.place(outs[size_t(i)], &err);
    in[size_t(1 + i)] = &w[size_t(i)]->dl;
    in[size_t(1 + kLayers + i)] = &b[size_t(i)]->dl;
    out[i == L - 1 ? 0 : size_t(1 + i)] = &outs[size_t(i)]->dl;
  }
  for (int i = L - 1; i < kLayers - 1 && ok; ++i) out[size_t(1 + i)] = unused(call, c, "h" + std::to_string(i), &err);
  if (!ok) {
    o.detail = "setup: " + err;
    return o;
  }
  if (!invoke(reg, dev, DLFUSE_OP_MLP, in, out, c, &o)) return o;
  const Tolerance tol = tolerance_for(dt);
  CheckStats stats;
  HostTensor prev = x->host;
  for (int i = 0; i < L; ++i) {
    HostTensor got;
    if (!call.download(outs[size_t(i)], &got, &err)) {
      o.detail = "readback: " + err;
      return o;
    }
    const int act = i == L - 1 ? c.out_act : c.act;
    // Layer i from the input the device gave it.
    const RefOut ref = ref_matmul_activation(dense(prev), dense(w[size_t(i)]->host), dense(b[size_t(i)]->host), act)[0];
    check_values(outs[size_t(i)]->role, got, ref, tol, &stats);
    check_outside_view(outs[size_t(i)]->role, got, outs[size_t(i)]->host, &stats);
    prev = got;
  }
  for (Arg* a : {x}) {
    HostTensor got;
    if (call.download(a, &got, &err)) check_unchanged(a->role, got, a->host, &stats);
  }
  return finish(std::move(o), stats, L);
}

// Values a saved output of `act` takes in the backward's data: exact derivatives on a coarse grid.
std::vector<double> saved_values(int act) {
  switch (act) {
    case DLFUSE_ACT_RELU: return {0, 1, 2};
    case DLFUSE_ACT_SIGMOID: return {0.25, 0.5, 0.75};
    case DLFUSE_ACT_TANH: return {-0.5, 0, 0.5};
    default: return {-2, -1, 0, 1, 2};
  }
}

void fill_from(HostTensor& t, const std::vector<double>& values, std::mt19937_64& rng) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, values[size_t(rng() % values.size())]);
}

// At most two entries of +-1 in every row and column: a layer at most doubles the largest
// magnitude of what passes through it, either way.
void fill_sparse_weight(HostTensor& t, std::mt19937_64& rng) {
  const int64_t K = t.shape()[0], N = t.shape()[1];
  std::vector<double> w(size_t(K * N), 0.0);
  std::vector<int64_t> perm(size_t(std::max(K, N)));
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t j = 0; j < perm.size(); ++j) perm[j] = int64_t(j);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t r = 0; r < K; ++r)
      if (perm[size_t(r)] < N) w[size_t(r * N + perm[size_t(r)])] += (rng() & 1) ? 1.0 : -1.0;
  }
  for (int64_t i = 0; i < K * N; ++i) t.set(i, w[size_t(i)]);
}

bool exact_in(DLDataType dt, const std::vector<double>& v) {
  HostTensor one(dt, {1}, Layout::kCompact, 0);
  for (double e : v) {
    one.set(0, e);
    if (one.get(0) != e) return false;
  }
  return true;
}

// The forward with h0..h5 NULL: only `out` comes back, so the data are the backward's kind
// (every hidden value exact in the dtype) and `out` is checked against the whole chain.
MlpOutcome run_forward_unkept(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const MlpCase& c, uint64_t seed) {
  MlpOutcome o;
  o.name = c.name;
  std::mt19937_64 rng = case_rng(DLFUSE_OP_MLP, c, dt, seed);
  const int L = c.layers();
  Call call(reg, dev, dt);
  std::string err;
  Arg* x = call.add("x", {c.M, c.widths[0]});
  fill_from(x->host, saved_values(DLFUSE_ACT_IDENTITY), rng);
  std::vector<Arg*> w, b;
  std::vector<const DLTensor*> in(1 + 2 * kLayers, nullptr);
  bool ok = call.place(x, &err);
  in[0] = &x->dl;
  for (int i = 0; i < L && ok; ++i) {
    w.push_back(call.add("w" + std::to_string(i), {c.widths[size_t(i)], c.widths[size_t(i + 1)]}, weight_layout(c)));
    b.push_back(call.add("b" + std::to_string(i), {c.widths[size_t(i + 1)]}));
    fill_sparse_weight(w.back()->host, rng);
    fill_from(b.back()->host, {-1, 0, 1}, rng);
    ok = call.place(w.back(), &err) && call.place(b.back(), &err);
    in[size_t(1 + i)] = &w.back()->dl;
    in[size_t(1 + kLayers + i)] = &b.back()->dl;
  }
  Arg* out = call.add("out", {c.M, c.widths[size_t(L)]});
  out->host.fill_buffer(kPoison);
  ok = ok && call.place(out, &err);
  if (!ok) {
    o.detail = "setup: " + err;
    return o;
  }
  std::vector<DLTensor*> outs(kLayers, nullptr);
  outs[0] = &out->dl;
  if (!invoke(reg, dev, DLFUSE_OP_MLP, in, outs, c, &o)) return o;
  Dense h = dense(x->host);
  RefOut ref;
  for (int i = 0; i < L; ++i) {
    ref = ref_matmul_activation(h, dense(w[size_t(i)]->host), dense(b[size_t(i)]->host),
                                i == L - 1 ? c.out_act : c.act)[0];
    h = Dense{ref.shape, ref.val};
    if (i < L - 1 && !exact_in(dt, h.v)) {
      o.detail = "the case's data are not exact in " + dtype_name(dt) + " at layer " + std::to_string(i) +
                 " (a bug of the suite)";
      return o;
    }
  }
  HostTensor got;
  if (!call.download(out, &got, &err)) {
    o.detail = "readback: " + err;
    return o;
  }
  CheckStats stats;
  check_values("out", got, ref, tolerance_for(dt), &stats);
  check_outside_view("out", got, out->host, &stats);
  return finish(std::move(o), stats, L);
}

MlpOutcome run_backward(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const MlpCase& c, uint64_t seed) {
  MlpOutcome o;
  o.name = c.name;
  std::mt19937_64 rng = case_rng(DLFUSE_OP_MLP_BACKWARD, c, dt, seed);
  const int L = c.layers();
  const int64_t M = c.M;
  Call call(reg, dev, dt);
  std::string err;
  Arg* g = call.add("grad_out", {M, c.widths[size_t(L)]});
  Arg* x = call.add("x", {M, c.widths[0]});
  fill_from(g->host, saved_values(DLFUSE_ACT_IDENTITY), rng);
  fill_from(x->host, saved_values(DLFUSE_ACT_IDENTITY), rng);
  std::vector<Arg*> w, h, gw, gb;
  for (int i = 0; i < L; ++i) {
    w.push_back(call.add("w" + std::to_string(i), {c.widths[size_t(i)], c.widths[size_t(i + 1)]}, weight_layout(c)));
    fill_sparse_weight(w.back()->host, rng);
    if (i < L - 1) {
      h.push_back(call.add("h" + std::to_string(i), {M, c.widths[size_t(i + 1)]}));
      fill_from(h.back()->host, saved_values(c.act), rng);
    }
    gw.push_back(call.add("grad_w" + std::to_string(i), {c.widths[size_t(i)], c.widths[size_t(i + 1)]}));
    gb.push_back(call.add("grad_b" + std::to_string(i), {c.widths[size_t(i + 1)]}));
  }
  Arg* fwd_out = call.add("out", {M, c.widths[size_t(L)]});
  fill_from(fwd_out->host, saved_values(c.out_act), rng);
  Arg* gx = call.add("grad_x", {M, c.widths[0]});
  auto wanted = [&](const Arg* a) { return c.only.empty() || std::count(c.only.begin(), c.only.end(), a->role) > 0; };
  std::vector<Arg*> results = {gx};
  for (int i = 0; i < L; ++i) results.push_back(gw[size_t(i)]);
  for (int i = 0; i < L; ++i) results.push_back(gb[size_t(i)]);
  for (Arg* r : results) r->host.fill_buffer(kPoison);

  std::vector<const DLTensor*> in(2 + kLayers + (kLayers - 1) + 1, nullptr);
  std::vector<DLTensor*> out(1 + 2 * kLayers, nullptr);
  bool ok = call.place(g, &err) && call.place(x, &err);
  in[0] = &g->dl;
  in[1] = &x->dl;
  for (int i = 0; i < L && ok; ++i) {
    ok = call.place(w[size_t(i)], &err);
    in[size_t(2 + i)] = &w[size_t(i)]->dl;
    if (i < L - 1) {
      ok = ok && call.place(h[size_t(i)], &err);
      in[size_t(2 + kLayers + i)] = &h[size_t(i)]->dl;
    }
  }
  for (int i = L - 1; i < kLayers - 1 && ok; ++i)
    in[size_t(2 + kLayers + i)] = unused(call, c, "h" + std::to_string(i), &err);
  if (ok && c.pass_out) {
    ok = call.place(fwd_out, &err);
    in.back() = &fwd_out->dl;
  }
  for (Arg* r : results)
    if (ok && wanted(r)) ok = call.place(r, &err);
  if (ok && wanted(gx)) out[0] = &gx->dl;
  for (int i = 0; i < kLayers && ok; ++i) {
    if (i >= L) {
      out[size_t(1 + i)] = unused(call, c, "grad_w" + std::to_string(i), &err);
      out[size_t(1 + kLayers + i)] = unused(call, c, "grad_b" + std::to_string(i), &err);
      continue;
    }
    if (wanted(gw[size_t(i)])) out[size_t(1 + i)] = &gw[size_t(i)]->dl;
    if (wanted(gb[size_t(i)])) out[size_t(1 + kLayers + i)] = &gb[size_t(i)]->dl;
  }
  if (!ok) {
    o.detail = "setup: " + err;
    return o;
  }
  if (!invoke(reg, dev, DLFUSE_OP_MLP_BACKWARD, in, out, c, &o)) return o;

  // The reference, layer by layer from the top; every layer-to-layer gradient must be exact
  // in the dtype (the data are built so), or the case itself is wrong.
  std::vector<RefOut> ref_w(static_cast<size_t>(L)), ref_b(static_cast<size_t>(L));
  RefOut ref_x;
  Dense grad = dense(g->host);
  for (int i = L - 1; i >= 0; --i) {
    const Dense a = dense(i > 0 ? h[size_t(i - 1)]->host : x->host);
    const bool top = i == L - 1;
    // IDENTITY's derivative reads no value: grad stands in for an absent out.
    const Dense saved = top ? (c.pass_out ? dense(fwd_out->host) : grad) : dense(h[size_t(i)]->host);
    const Grads r = ref_matmul_activation_backward(grad, a, dense(w[size_t(i)]->host), saved, true,
                                                   top ? c.out_act : c.act, {c.widths[size_t(i + 1)]});
    ref_w[size_t(i)] = r.second;
    ref_b[size_t(i)] = r.bias;
    if (i == 0) {
      ref_x = r.first;
    } else {
      grad = Dense{r.first.shape, r.first.val};
      if (!exact_in(dt, grad.v)) {
        o.detail = "the case's data are not exact in " + dtype_name(dt) + " below layer " + std::to_string(i) +
                   " (a bug of the suite)";
        return o;
      }
    }
  }
  const Tolerance tol = tolerance_for(dt);
  CheckStats stats;
  for (size_t k = 0; k < results.size(); ++k) {
    Arg* r = results[k];
    if (!wanted(r)) continue;
    HostTensor got;
    if (!call.download(r, &got, &err)) {
      o.detail = "readback: " + err;
      return o;
    }
    const RefOut& ref = k == 0 ? ref_x : k <= size_t(L) ? ref_w[k - 1] : ref_b[k - 1 - size_t(L)];
    check_values(r->role, got, ref, tol, &stats);
    check_outside_view(r->role, got, r->host, &stats);
  }
  return finish(std::move(o), stats, L);
}

}  // namespace

bool is_mlp_op(const std::string& name) { return name == DLFUSE_OP_MLP || name == DLFUSE_OP_MLP_BACKWARD; }

std::vector<MlpOutcome> run_mlp_cases(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const std::string& op,
                                      uint64_t seed, const std::string& filter) {
  const bool backward = op == DLFUSE_OP_MLP_BACKWARD;
  const bool f32 = dt.code == kDLFloat && dt.bits >= 32;
  std::vector<MlpOutcome> outcomes;
  for (const MlpCase& c : backward ? backward_cases() : forward_cases()) {
    if ((c.float32_only && !f32) || (!filter.empty() && c.name.find(filter) == std::string::npos)) continue;
    outcomes.push_back(backward            ? run_backward(reg, dev, dt, c, seed)
                       : c.hidden_not_kept ? run_forward_unkept(reg, dev, dt, c, seed)
                                           : run_forward(reg, dev, dt, c, seed));
  }
  return outcomes;
}

}  // namespace dlfuse_conformance
