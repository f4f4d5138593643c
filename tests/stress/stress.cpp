// stress: many threads, many mixed calls, every result checked.
//
// Usage: dlfuse_stress <plugin.so> [threads=8] [calls per thread=10000]
//
// Each thread builds its own cases (both ops, forward and backward, several shapes and
// activations, every float dtype the plugin declares among float32, bfloat16, float16,
// float64), computes each case's float64 reference once, then makes `calls` calls
// through one shared registry, cycling over its cases and over both entry points (the
// typed functions and dlfuse_op_call on shared op handles). Before each call the outputs
// are poisoned; after it every element is checked against the reference with the
// tolerances of docs/ops.md. Every 8th call is a bad call (a shape, an overlap, an
// attribute, a device id that is wrong) that must fail with INVALID_ARGUMENT and this
// thread's own message. Exit 0 only when every call behaved.
#include <dlfuse/dlfuse.h>

#include "reference.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---- dtypes ------------------------------------------------------------------------------

struct Dtype {
  DLDataType dl;
  const char* name;
  double rtol, atol;  // docs/ops.md
};
const Dtype kF32{{kDLFloat, 32, 1}, "float32", 2e-5, 1e-6};
const Dtype kF64{{kDLFloat, 64, 1}, "float64", 1e-12, 1e-300};
const Dtype kF16{{kDLFloat, 16, 1}, "float16", 4e-3, 1e-3};
const Dtype kBF16{{kDLBfloat, 16, 1}, "bfloat16", 1.6e-2, 1e-2};

uint16_t to_half(float f) {
  // Inputs are small dyadic values, exact in half; outputs are only read back.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = int((x >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0) return uint16_t(sign);
  if (exp <= 0) {  // subnormal half
    const uint32_t m = (mant | 0x800000u) >> (1 - exp + 13);
    return uint16_t(sign | m);
  }
  if (exp >= 31) return uint16_t(sign | 0x7c00u);
  return uint16_t(sign | (uint32_t(exp) << 10) | (mant >> 13));
}
float from_half(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    f = mant ? NAN : INFINITY;
  } else {
    f = std::ldexp(float(mant | 0x400u), exp - 25);
  }
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x |= sign;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return uint16_t(x >> 16);  // exact for the inputs used here
}
float from_bf16(uint16_t b) {
  const uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// ---- host tensors ----------------------------------------------------------------------

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;  // 8-byte aligned
  Dtype dt;
  DLTensor t{};
  int64_t n = 1;
  Tensor(std::vector<int64_t> s, const Dtype& d) : shape(std::move(s)), dt(d) {
    for (int64_t x : shape) n *= x;
    storage.assign(size_t(n * (d.dl.bits / 8) + 7) / 8 + 1, 0);
    t.data = storage.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = d.dl;
    t.shape = shape.data();
  }
  Tensor(const Tensor&) = delete;
  void set(int64_t i, double v) {
    void* p = storage.data();
    switch (dt.dl.bits) {
      case 64: static_cast<double*>(p)[i] = v; break;
      case 32: static_cast<float*>(p)[i] = float(v); break;
      default: static_cast<uint16_t*>(p)[i] = dt.dl.code == kDLBfloat ? to_bf16(float(v)) : to_half(float(v));
    }
  }
  double get(int64_t i) const {
    const void* p = storage.data();
    switch (dt.dl.bits) {
      case 64: return static_cast<const double*>(p)[i];
      case 32: return static_cast<const float*>(p)[i];
      default: {
        const uint16_t h = static_cast<const uint16_t*>(p)[i];
        return dt.dl.code == kDLBfloat ? from_bf16(h) : from_half(h);
      }
    }
  }
  void poison() {
    for (int64_t i = 0; i < n; ++i) set(i, -4242.0);
  }
};

// ---- activations (float64) -------------------------------------------------------------------

// The conformance suite's float64 reference (tests/conformance/reference.h), written once.
double act(int a, double p) { return dlfuse_conformance::ref_activate(a, p); }
double dact(int a, double p) { return dlfuse_conformance::ref_activate_grad(a, p, 1.0); }

// ---- cases -------------------------------------------------------------------------------------

// Small dyadic values (k/8, |k| <= 16): exact in every dtype, sums of a few exact in float32.
struct Rng {
  uint64_t s;
  double next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return double(int64_t((s >> 33) % 33) - 16) / 8.0;
  }
};

struct Expect {
  std::vector<double> ref, scale;  // per element of one output
};

struct Case {
  std::string what;
  int op;  // 0 matmul, 1 matmul bwd, 2 ama, 3 ama bwd
  int activation = 0;
  double multiplier = 1.0;
  std::vector<std::unique_ptr<Tensor>> in, out;
  std::vector<Expect> expect;  // one per output
  Dtype dt;
};

Tensor* add(std::vector<std::unique_ptr<Tensor>>& v, std::vector<int64_t> shape, const Dtype& d, Rng* fill) {
  v.push_back(std::make_unique<Tensor>(std::move(shape), d));
  if (fill)
    for (int64_t i = 0; i < v.back()->n; ++i) v.back()->set(i, fill->next());
  return v.back().get();
}

// matmul [M,K] @ [K,N] + bias[N] (or [M,1]); forward or backward.
void make_matmul(Case* c, int64_t M, int64_t K, int64_t N, bool bias_col, bool backward, Rng* r) {
  Tensor* a = add(c->in, {M, K}, c->dt, r);
  Tensor* b = add(c->in, {K, N}, c->dt, r);
  std::vector<int64_t> bshape = bias_col ? std::vector<int64_t>{M, 1} : std::vector<int64_t>{N};
  std::vector<double> z(size_t(M * N)), zscale(size_t(M * N));
  std::vector<double> bias(size_t(bias_col ? M : N));
  for (double& v : bias) v = r->next();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double bv = bias[size_t(bias_col ? m : n)];
      double s = bv, sc = std::fabs(bv);
      for (int64_t k = 0; k < K; ++k) {
        const double t = a->get(m * K + k) * b->get(k * N + n);
        s += t;
        sc += std::fabs(t);
      }
      z[size_t(m * N + n)] = s;
      zscale[size_t(m * N + n)] = sc;
    }
  if (!backward) {
    Tensor* bt = add(c->in, bshape, c->dt, nullptr);
    for (int64_t i = 0; i < bt->n; ++i) bt->set(i, bias[size_t(i)]);
    add(c->out, {M, N}, c->dt, nullptr);
    Expect e;
    for (size_t i = 0; i < z.size(); ++i) {
      e.ref.push_back(z[i] > 0 ? z[i] : 0.0);
      e.scale.push_back(zscale[i]);
    }
    c->expect.push_back(e);
    // inputs order: a, b, bias
    return;
  }
  // backward: inputs grad_out, a, b, out. `out` is given (any values: the select uses it).
  Tensor* g = add(c->in, {M, N}, c->dt, r);
  Tensor* o = add(c->in, {M, N}, c->dt, r);  // signs decide the select
  std::swap(c->in[0], c->in[2]);             // now: g, b, a, o
  std::swap(c->in[1], c->in[2]);             // now: g, a, b, o
  std::vector<double> dz(size_t(M * N));
  for (int64_t i = 0; i < M * N; ++i) dz[size_t(i)] = o->get(i) > 0 ? g->get(i) : 0.0;
  add(c->out, {M, K}, c->dt, nullptr);
  add(c->out, {K, N}, c->dt, nullptr);
  add(c->out, bshape, c->dt, nullptr);
  Expect ga, gb, gbias;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0, sc = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double t = dz[size_t(m * N + n)] * b->get(k * N + n);
        s += t;
        sc += std::fabs(t);
      }
      ga.ref.push_back(s);
      ga.scale.push_back(sc);
    }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, sc = 0;
      for (int64_t m = 0; m < M; ++m) {
        const double t = a->get(m * K + k) * dz[size_t(m * N + n)];
        s += t;
        sc += std::fabs(t);
      }
      gb.ref.push_back(s);
      gb.scale.push_back(sc);
    }
  const int64_t nb = bias_col ? M : N;
  for (int64_t j = 0; j < nb; ++j) {
    double s = 0, sc = 0;
    for (int64_t i = 0; i < (bias_col ? N : M); ++i) {
      const double t = bias_col ? dz[size_t(j * N + i)] : dz[size_t(i * N + j)];
      s += t;
      sc += std::fabs(t);
    }
    gbias.ref.push_back(s);
    gbias.scale.push_back(sc);
  }
  c->expect = {ga, gb, gbias};
}

// add_mul_activation: x [M,N], y [N] (broadcast) or [M,N], bias [1,N].
void make_ama(Case* c, int64_t M, int64_t N, bool y_row, bool backward, Rng* r) {
  const bool bwd = backward;
  Tensor* g = bwd ? add(c->in, {M, N}, c->dt, r) : nullptr;
  Tensor* x = add(c->in, {M, N}, c->dt, r);
  Tensor* y = add(c->in, y_row ? std::vector<int64_t>{N} : std::vector<int64_t>{M, N}, c->dt, r);
  Tensor* bias = add(c->in, {1, N}, c->dt, r);
  const double mul = c->multiplier;
  auto pre = [&](int64_t m, int64_t n) {
    return x->get(m * N + n) + bias->get(n) + mul * y->get(y_row ? n : m * N + n);
  };
  if (!bwd) {
    add(c->out, {M, N}, c->dt, nullptr);
    Expect e;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const double v = act(c->activation, pre(m, n));
        e.ref.push_back(v);
        e.scale.push_back(std::fabs(v));
      }
    c->expect.push_back(e);
    return;
  }
  add(c->out, {M, N}, c->dt, nullptr);
  add(c->out, y_row ? std::vector<int64_t>{N} : std::vector<int64_t>{M, N}, c->dt, nullptr);
  add(c->out, {1, N}, c->dt, nullptr);
  Expect gx, gy, gb;
  gy.ref.assign(size_t(y_row ? N : M * N), 0.0);
  gy.scale.assign(gy.ref.size(), 0.0);
  gb.ref.assign(size_t(N), 0.0);
  gb.scale.assign(size_t(N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double d = g->get(m * N + n) * dact(c->activation, pre(m, n));
      gx.ref.push_back(d);
      gx.scale.push_back(std::fabs(d));
      const size_t iy = size_t(y_row ? n : m * N + n);
      gy.ref[iy] += mul * d;
      gy.scale[iy] += std::fabs(mul * d);
      gb.ref[size_t(n)] += d;
      gb.scale[size_t(n)] += std::fabs(d);
    }
  c->expect = {gx, gy, gb};
}

// ---- the shared registry and handles ------------------------------------------------------

dlfuse_registry_t g_reg = nullptr;
dlfuse_op_t g_ops[4] = {};
const char* const kOpNames[4] = {DLFUSE_OP_MATMUL_ADD_RELU, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD,
                                 DLFUSE_OP_ADD_MUL_ACTIVATION, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD};
std::vector<Dtype> g_dtypes;
std::atomic<long> g_fail{0}, g_good{0}, g_bad{0};

void complain(int thread, const std::string& what) {
  if (g_fail.fetch_add(1) < 20) std::fprintf(stderr, "thread %d: %s\n", thread, what.c_str());
}

dlfuse_status_t call(const Case& c, bool generic) {
  std::vector<const DLTensor*> in;
  std::vector<DLTensor*> out;
  for (const auto& t : c.in) in.push_back(&t->t);
  for (const auto& t : c.out) out.push_back(&t->t);
  if (generic) {
    dlfuse_attr_t attrs[2];
    std::memset(attrs, 0, sizeof attrs);
    int32_t n = 0;
    if (c.op >= 2) {
      attrs[0].key = DLFUSE_ATTR_ACTIVATION;
      attrs[0].type = DLFUSE_ATTR_INT64;
      attrs[0].value.i64 = c.activation;
      attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
      attrs[1].type = DLFUSE_ATTR_FLOAT64;
      attrs[1].value.f64 = c.multiplier;
      n = 2;
    }
    return dlfuse_op_call(g_ops[c.op], in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), attrs, n,
                          nullptr);
  }
  const auto a = static_cast<dlfuse_activation_t>(c.activation);
  switch (c.op) {
    case 0: return dlfuse_matmul_add_relu(g_reg, in[0], in[1], in[2], out[0], 0, nullptr);
    case 1:
      return dlfuse_matmul_add_relu_backward(g_reg, in[0], in[1], in[2], in[3], out[0], out[1], out[2], 0, nullptr);
    case 2: return dlfuse_add_mul_activation(g_reg, in[0], in[1], in[2], c.multiplier, a, out[0], nullptr);
    default:
      return dlfuse_add_mul_activation_backward(g_reg, in[0], in[1], in[2], in[3], c.multiplier, a, out[0], out[1],
                                                out[2], nullptr);
  }
}

bool check(int thread, const Case& c) {
  for (size_t o = 0; o < c.out.size(); ++o) {
    const Expect& e = c.expect[o];
    for (int64_t i = 0; i < c.out[o]->n; ++i) {
      const double got = c.out[o]->get(i), ref = e.ref[size_t(i)];
      if (!(std::fabs(got - ref) <= c.dt.atol + c.dt.rtol * e.scale[size_t(i)])) {
        complain(thread, c.what + ": output " + std::to_string(o) + "[" + std::to_string(i) + "] is " +
                             std::to_string(got) + "; expected " + std::to_string(ref));
        return false;
      }
    }
  }
  return true;
}

// A bad call of this thread: which of several mistakes depends on k.
void bad_call(int thread, int k, std::vector<Case>& cases) {
  Case& c = cases[size_t(k) % cases.size()];
  const std::string tag = "t" + std::to_string(thread) + "_" + std::to_string(k % 5);
  dlfuse_status_t s;
  std::string must;
  switch (k % 5) {
    case 0: {  // an op nobody offers, named after this thread
      dlfuse_op_t op = nullptr;
      const std::string name = "no_such_op_" + tag;
      s = dlfuse_op_get(g_reg, name.c_str(), &op);
      must = name;
      if (s != DLFUSE_STATUS_NOT_FOUND) complain(thread, "op_get(" + name + ") did not say NOT_FOUND");
      break;
    }
    case 1: {  // output overlapping an input
      Tensor& x = *c.in[0];
      std::vector<DLTensor*> out;
      for (auto& t : c.out) out.push_back(&t->t);
      DLTensor alias = c.out[0]->t;  // one element into x: overlapping, never exactly x
      alias.data = x.t.data;
      alias.byte_offset = uint64_t(x.t.dtype.bits / 8);
      std::vector<const DLTensor*> in;
      for (auto& t : c.in) in.push_back(&t->t);
      out[0] = &alias;
      dlfuse_attr_t attrs[1] = {};
      attrs[0].key = DLFUSE_ATTR_ACTIVATION;
      attrs[0].type = DLFUSE_ATTR_INT64;
      s = dlfuse_op_call(g_ops[c.op], in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), attrs,
                         c.op >= 2 ? 1 : 0, nullptr);
      must = "overlaps";
      break;
    }
    case 2: {  // a wrong attribute value
      std::vector<const DLTensor*> in;
      std::vector<DLTensor*> out;
      for (auto& t : c.in) in.push_back(&t->t);
      for (auto& t : c.out) out.push_back(&t->t);
      dlfuse_attr_t a = {};
      a.key = c.op >= 2 ? DLFUSE_ATTR_ACTIVATION : DLFUSE_ATTR_ALLOW_TF32;
      a.type = DLFUSE_ATTR_INT64;
      a.value.i64 = 1000 + thread;
      s = dlfuse_op_call(g_ops[c.op], in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), &a, 1, nullptr);
      must = std::to_string(1000 + thread);
      break;
    }
    case 3: {  // a device id past the plugin's devices
      std::vector<DLTensor> copies;
      for (auto& t : c.in) copies.push_back(t->t);
      for (auto& t : c.out) copies.push_back(t->t);
      for (auto& t : copies) t.device.device_id = 7 + thread;
      std::vector<const DLTensor*> in;
      std::vector<DLTensor*> out;
      for (size_t i = 0; i < c.in.size(); ++i) in.push_back(&copies[i]);
      for (size_t i = 0; i < c.out.size(); ++i) out.push_back(&copies[c.in.size() + i]);
      dlfuse_attr_t a = {};
      a.key = DLFUSE_ATTR_ACTIVATION;
      a.type = DLFUSE_ATTR_INT64;
      s = dlfuse_op_call(g_ops[c.op], in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), &a,
                         c.op >= 2 ? 1 : 0, nullptr);
      must = "cpu:" + std::to_string(7 + thread);
      break;
    }
    default: {                              // an output of the wrong shape
      int64_t shape[2] = {0, 41 + thread};  // empty: overlaps nothing, so the shape check speaks
      DLTensor wrong = c.out[0]->t;
      wrong.shape = shape;
      wrong.ndim = 2;
      std::vector<const DLTensor*> in;
      std::vector<DLTensor*> out;
      for (auto& t : c.in) in.push_back(&t->t);
      for (auto& t : c.out) out.push_back(&t->t);
      out[0] = &wrong;
      dlfuse_attr_t a = {};
      a.key = DLFUSE_ATTR_ACTIVATION;
      a.type = DLFUSE_ATTR_INT64;
      s = dlfuse_op_call(g_ops[c.op], in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), &a,
                         c.op >= 2 ? 1 : 0, nullptr);
      must = std::to_string(41 + thread);
      break;
    }
  }
  g_bad.fetch_add(1);
  const std::string msg = dlfuse_last_error();
  if (s == DLFUSE_STATUS_OK)
    complain(thread, "bad call " + tag + " succeeded");
  else if (msg.find(must) == std::string::npos)
    complain(thread, "bad call " + tag + ": message lacks '" + must + "' (another thread's?): " + msg);
}

void worker(int thread, long calls) {
  Rng r{uint64_t(thread) * 7919 + 17};
  std::vector<Case> cases;
  const int64_t dims[][3] = {{3, 5, 4}, {8, 16, 8}, {1, 7, 9}, {16, 3, 12}};
  int k = 0;
  for (const Dtype& d : g_dtypes)
    for (int op = 0; op < 4; ++op)
      for (int s = 0; s < 2; ++s) {
        Case c;
        c.dt = d;
        c.op = op;
        const int64_t* dm = dims[(thread + k) % 4];
        c.activation = (thread + k) % DLFUSE_ACT_COUNT;
        c.multiplier = 0.5 * ((k % 5) - 2);
        if (op < 2)
          make_matmul(&c, dm[0], dm[1], dm[2], s == 1, op == 1, &r);
        else
          make_ama(&c, dm[0], dm[2], s == 1, op == 3, &r);
        c.what = std::string(kOpNames[op]) + " " + d.name + " act " + std::to_string(c.activation) + " shape " +
                 std::to_string(dm[0]) + "x" + std::to_string(dm[1]) + "x" + std::to_string(dm[2]);
        cases.push_back(std::move(c));
        ++k;
      }
  for (long i = 0; i < calls; ++i) {
    if (i % 8 == 7) {
      bad_call(thread, int(i / 8), cases);
      continue;
    }
    Case& c = cases[size_t(i) % cases.size()];
    for (auto& t : c.out) t->poison();
    const dlfuse_status_t s = call(c, (i / 3) % 2 == 1);
    if (s != DLFUSE_STATUS_OK) {
      complain(thread, c.what + ": " + dlfuse_status_string(s) + ": " + dlfuse_last_error());
      continue;
    }
    if (check(thread, c)) g_good.fetch_add(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <libdlfuse_plugin.so> [threads=8] [calls per thread=10000]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 8;
  const long calls = argc > 3 ? std::atol(argv[3]) : 10000;
  dlfuse_registry_options_t o{sizeof o, DLFUSE_DISCOVER_NONE, nullptr};
  if (dlfuse_registry_create(&o, &g_reg) != DLFUSE_STATUS_OK ||
      dlfuse_registry_load(g_reg, argv[1], nullptr) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlfuse_last_error());
    return 1;
  }
  for (int i = 0; i < 4; ++i)
    if (dlfuse_op_get(g_reg, kOpNames[i], &g_ops[i]) != DLFUSE_STATUS_OK) {
      std::fprintf(stderr, "%s\n", dlfuse_last_error());
      return 1;
    }
  for (const Dtype& d : {kF32, kBF16, kF16, kF64}) {
    int32_t p = -1;
    bool all = true;
    for (int i = 0; i < 4; ++i) all = all && dlfuse_op_resolve(g_ops[i], kDLCPU, d.dl, &p) == DLFUSE_STATUS_OK;
    if (all) g_dtypes.push_back(d);
  }
  if (g_dtypes.empty()) {
    std::fprintf(stderr, "the plugin serves none of float32, bfloat16, float16, float64 on the CPU\n");
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, calls);
  for (auto& t : pool) t.join();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string names;
  for (const Dtype& d : g_dtypes) names += std::string(names.empty() ? "" : ",") + d.name;
  std::printf(
      "stress: %d threads x %ld calls on %s (%s): %ld checked results, %ld bad calls refused, %ld failures, %.1f s\n",
      threads, calls, argv[1], names.c_str(), g_good.load(), g_bad.load(), g_fail.load(), sec);
  dlfuse_registry_destroy(g_reg);
  return g_fail.load() == 0 ? 0 : 1;
}
