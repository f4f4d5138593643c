// dlfuse_bench: times plugins through the public C API. One JSON object per line on
// stdout (read by bench/run.py); progress on stderr.
//
//   dlfuse_bench list                         plugins that default discovery finds
//   dlfuse_bench ops PLUGIN.so [--device-id I] [--dtypes float32,bfloat16] [--mode smoke|quick|full]
//                    [--ops LIST] [--shapes LIST] [--activations relu,sigmoid] [--large] [--no-grad-y]
//                    [--no-check]
//                                             both ops, forward and backward, over the anchor shapes
//                                             (--large adds matmul 8192x4096x4096, the GPU anchor;
//                                             --shapes MxKxN,MxN replaces them; --no-grad-y adds the
//                                             add_mul backward without grad_y)
//   dlfuse_bench dispatch NOOP.so [--mode smoke|quick|full]
//                                             ns per call of a kernel that does nothing
//   dlfuse_bench copy-bw [--mode ...]         host memcpy bandwidth (the CPU copy ceiling)
//
// Timing: bench/driver/timing.hpp. Inputs rotate over several buffer sets when a set is
// smaller than the last-level cache, so that repeated calls do not just measure the cache.
// After timing a forward, 64 of its outputs are checked against float64, and matmul's
// relu(NaN) = NaN with a NaN in A (exit status 3 if any is off), so that a wrong kernel does
// not get a number.
#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "timing.hpp"

namespace {

using namespace bench;

std::string g_only;  // dispatch --only SUBSTR: the cases whose name contains it
bool g_check_failed = false;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dlfuse_bench: %s\n", what.c_str());
  std::exit(1);
}

void ck(dlfuse_status_t st, const char* what) {
  if (st != DLFUSE_STATUS_OK) die(std::string(what) + ": " + dlfuse_status_string(st) + ": " + dlfuse_last_error());
}

std::string json_escape(const char* s) {
  std::string o;
  for (; s && *s; ++s) {
    if (*s == '"' || *s == '\\') o += '\\';
    if (static_cast<unsigned char>(*s) < 0x20) continue;
    o += *s;
  }
  return o;
}

// ---- data on the plugin's device --------------------------------------------------------

struct Dtype {
  const char* name;
  DLDataType dl;
  int size;
};
const Dtype kDtypes[] = {
    {"float32", {kDLFloat, 32, 1}, 4}, {"bfloat16", {kDLBfloat, 16, 1}, 2}, {"float64", {kDLFloat, 64, 1}, 8}};

const Dtype* find_dtype(const std::string& n) {
  for (const Dtype& d : kDtypes)
    if (n == d.name) return &d;
  die("unknown dtype '" + n + "' (expected float32, bfloat16 or float64)");
}

double to_double(const unsigned char* p, const Dtype& dt) {
  if (dt.size == 8) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  float f;
  if (dt.size == 4) {
    std::memcpy(&f, p, 4);
  } else {
    const uint32_t u = uint32_t(p[0] | (p[1] << 8)) << 16;
    std::memcpy(&f, &u, 4);
  }
  return f;
}

// Host values uniform in [-1, 1), converted to the dtype's bytes (never zeros: zeros can
// run faster than real data and hide unwritten outputs).
std::vector<unsigned char> host_values(size_t n, const Dtype& dt, uint64_t seed) {
  std::vector<unsigned char> h(n * size_t(dt.size));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float v = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
    if (dt.size == 4) {
      std::memcpy(&h[i * 4], &v, 4);
    } else if (dt.size == 8) {
      const double d = v;
      std::memcpy(&h[i * 8], &d, 8);
    } else {  // bfloat16, round to nearest even
      uint32_t u;
      std::memcpy(&u, &v, 4);
      u += 0x7fff + ((u >> 16) & 1);
      const uint16_t b = uint16_t(u >> 16);
      std::memcpy(&h[i * 2], &b, 2);
    }
  }
  return h;
}

struct DevTensor {
  dlfuse_registry_t reg = nullptr;
  DLDevice dev{};
  void* ptr = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape;
  DLTensor t{};
  DevTensor(dlfuse_registry_t r, DLDevice d, const Dtype& dt, std::vector<int64_t> s, uint64_t seed)
      : reg(r), dev(d), shape(std::move(s)) {
    size_t n = 1;
    for (int64_t e : shape) n *= size_t(e);
    bytes = n * size_t(dt.size);
    ck(dlfuse_device_alloc(reg, dev, bytes, &ptr), "device_alloc");
    const std::vector<unsigned char> h = host_values(n, dt, seed);
    ck(dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, ptr, 0, h.data(), 0, h.size(), nullptr), "device_copy");
    t.data = ptr;
    t.device = dev;
    t.ndim = int32_t(shape.size());
    t.dtype = dt.dl;
    t.shape = shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> h(bytes);
    ck(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, h.data(), 0, ptr, 0, bytes, nullptr), "device_copy");
    return h;
  }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  ~DevTensor() {
    if (ptr) dlfuse_device_free(reg, dev, ptr);
  }
};

// ---- ops ---------------------------------------------------------------------------------

struct Ctx {
  dlfuse_registry_t reg;
  DLDevice dev;
  std::string impl, device;
  dlfuse_op_t mf, mb, af, ab;
  dlfuse_op_t ma = nullptr, mab = nullptr, mr = nullptr;  // ABI 1.1 ops, when wanted and offered
  std::function<void()> sync;
  bool check = true;
};

// Error of 64 outputs against float64 references, relative to the sum of the
// magnitudes that went into each (rounding of a sum grows with it); prints it with the row
// data and fails the run above what the dtype's rounding can explain.
std::string check_outputs(Ctx& c, const Dtype& dt, const std::string& what, size_t count,
                          const std::function<double(size_t, double*)>& ref, const DevTensor& out) {
  if (!c.check) return "";
  const std::vector<unsigned char> h = out.download();
  double worst = 0;
  uint64_t x = 12345;
  for (int t = 0; t < 64; ++t) {  // the first and last element (tile edges) and 62 others
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const size_t i = t == 0 ? 0 : t == 1 ? count - 1 : size_t(x >> 33) % count;
    double mag = 0;
    const double want = ref(i, &mag), got = to_double(&h[i * size_t(dt.size)], dt);
    const double err = std::isnan(want) || std::isnan(got) ? (std::isnan(want) == std::isnan(got) ? 0 : 1e30)
                                                           : std::fabs(got - want) / (mag + 1e-30);
    worst = std::max(worst, err);
  }
  const double tol = dt.size == 2 ? 2e-2 : dt.size == 4 ? 1e-4 : 1e-10;
  if (worst > tol) {
    g_check_failed = true;
    std::fprintf(stderr, "  CHECK FAILED: %s %s %s: max error / sum|terms| %.3g > %.3g\n", c.impl.c_str(), what.c_str(),
                 dt.name, worst, tol);
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, ", \"check_max_err\": %.3g, \"check\": \"%s\"", worst, worst > tol ? "FAIL" : "ok");
  return buf;
}

void bench_matmul(Ctx& c, const Dtype& dt, int64_t M, int64_t K, int64_t N) {
  const std::string shape = dims_str({M, K, N});
  const size_t set_bytes = size_t(M * K + K * N + 2 * M * N + N) * size_t(dt.size);
  const int sets = sets_for(set_bytes);
  const std::string extra = ", \"sets\": " + std::to_string(sets);
  std::vector<std::unique_ptr<DevTensor>> A, B, Bi, O, G;
  for (int s = 0; s < sets; ++s) {
    A.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 100 + s));
    B.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 200 + s));
    Bi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 300 + s));
    O.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 400 + s));
    G.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 500 + s));
  }
  auto fwd = [&](int i) {
    const int s = i % sets;
    const DLTensor* in[3] = {&A[s]->t, &B[s]->t, &Bi[s]->t};
    DLTensor* out[1] = {&O[s]->t};
    ck(dlfuse_op_call(c.mf, in, 3, out, 1, nullptr, 0, nullptr), "matmul_add_relu");
  };
  int batch = 0;
  Stats s = time_calls(fwd, c.sync, &batch);
  std::string chk;
  if (c.check) {
    fwd(0);
    c.sync();
    const auto a = A[0]->download(), b = B[0]->download(), bi = Bi[0]->download();
    const size_t e = size_t(dt.size);
    chk = check_outputs(
        c, dt, "matmul_add_relu " + shape, size_t(M * N),
        [&](size_t i, double* mag) {
          const int64_t m = int64_t(i) / N, n = int64_t(i) % N;
          double acc = to_double(&bi[size_t(n) * e], dt);
          *mag = std::fabs(acc);
          for (int64_t k = 0; k < K; ++k) {
            const double p = to_double(&a[size_t(m * K + k) * e], dt) * to_double(&b[size_t(k * N + n) * e], dt);
            acc += p;
            *mag += std::fabs(p);
          }
          return acc > 0 ? acc : 0.0;
        },
        *O[0]);
    // relu keeps NaN (docs/ops.md), also in whatever GEMM epilogue a plugin picks for this
    // shape: A[0, 0] = NaN must make all of row 0 NaN and nothing else.
    const uint64_t nan_bits = dt.size == 8 ? 0x7ff8000000000000ull : dt.size == 4 ? 0x7fc00000ull : 0x7fc0ull;
    ck(dlfuse_device_copy(c.reg, c.dev, DLFUSE_COPY_HOST_TO_DEVICE, A[0]->ptr, 0, &nan_bits, 0, e, nullptr), "copy");
    fwd(0);
    c.sync();
    const auto o = O[0]->download();
    int64_t nan_row0 = 0, nan_elsewhere = 0;
    for (size_t i = 0; i < size_t(M * N); ++i)
      (i < size_t(N) ? nan_row0 : nan_elsewhere) += std::isnan(to_double(&o[i * e], dt));
    ck(dlfuse_device_copy(c.reg, c.dev, DLFUSE_COPY_HOST_TO_DEVICE, A[0]->ptr, 0, a.data(), 0, e, nullptr), "copy");
    if (nan_row0 != N || nan_elsewhere != 0) {
      g_check_failed = true;
      std::fprintf(stderr,
                   "  CHECK FAILED: %s matmul_add_relu %s %s: A[0, 0] = NaN gave %lld of %lld NaN in row 0, "
                   "%lld elsewhere\n",
                   c.impl.c_str(), shape.c_str(), dt.name, (long long)nan_row0, (long long)N, (long long)nan_elsewhere);
      chk = ", \"check_max_err\": 1e30, \"check\": \"FAIL\"";
    }
    chk += ", \"nan_row0\": " + std::to_string(nan_row0) + ", \"nan_elsewhere\": " + std::to_string(nan_elsewhere);
  }
  row("matmul_add_relu", "fwd", dt.name, shape, c.impl, c.device, s, batch, extra + chk);
  // Backward from the forward's own outputs (a realistic relu mask).
  for (int i = 0; i < sets; ++i) fwd(i);
  c.sync();
  std::vector<std::unique_ptr<DevTensor>> GA, GB, GBi;
  const int bsets = std::max(1, sets / 2);
  for (int i = 0; i < bsets; ++i) {
    GA.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 600 + i));
    GB.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 700 + i));
    GBi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 800 + i));
  }
  auto bwd = [&](int i) {
    const int si = i % sets, so = i % bsets;
    const DLTensor* in[4] = {&G[si]->t, &A[si]->t, &B[si]->t, &O[si]->t};
    DLTensor* out[3] = {&GA[so]->t, &GB[so]->t, &GBi[so]->t};
    ck(dlfuse_op_call(c.mb, in, 4, out, 3, nullptr, 0, nullptr), "matmul_add_relu_backward");
  };
  s = time_calls(bwd, c.sync, &batch);
  row("matmul_add_relu", "bwd", dt.name, shape, c.impl, c.device, s, batch, extra);
}

void bench_add_mul(Ctx& c, const Dtype& dt, int64_t M, int64_t N, const std::string& act, bool no_grad_y) {
  const std::string shape = dims_str({M, N});
  // Activations other than relu get their own op label, so that their rows never sit in
  // one table cell with the relu rows of the peers.
  const std::string op = act == "relu" ? "add_mul_activation" : "add_mul_activation[" + act + "]";
  const size_t set_bytes = size_t(7 * M * N + 2 * N) * size_t(dt.size);
  const int sets = sets_for(set_bytes);
  std::vector<std::unique_ptr<DevTensor>> X, Y, Bi, O, G, GX, GY, GB;
  for (int s = 0; s < sets; ++s) {
    X.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1000 + s));
    Y.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1100 + s));
    Bi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 1200 + s));
    O.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1300 + s));
    G.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1400 + s));
    GX.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1500 + s));
    GY.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1600 + s));
    GB.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 1700 + s));
  }
  dlfuse_attr_t attrs[2] = {};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION;
  attrs[0].type = DLFUSE_ATTR_INT64;
  attrs[0].value.i64 = act == "relu" ? DLFUSE_ACT_RELU : DLFUSE_ACT_SIGMOID;  // validated by cmd_ops
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
  attrs[1].type = DLFUSE_ATTR_FLOAT64;
  attrs[1].value.f64 = 0.5;
  const std::string extra = ", \"activation\": \"" + act + "\", \"sets\": " + std::to_string(sets);
  auto fwd = [&](int i) {
    const int k = i % sets;
    const DLTensor* in[3] = {&X[k]->t, &Y[k]->t, &Bi[k]->t};
    DLTensor* out[1] = {&O[k]->t};
    ck(dlfuse_op_call(c.af, in, 3, out, 1, attrs, 2, nullptr), "add_mul_activation");
  };
  int batch = 0;
  Stats s = time_calls(fwd, c.sync, &batch);
  std::string chk;
  if (c.check) {
    fwd(0);
    c.sync();
    const auto x = X[0]->download(), y = Y[0]->download(), b = Bi[0]->download();
    const size_t e = size_t(dt.size);
    chk = check_outputs(
        c, dt, op + " " + shape, size_t(M * N),
        [&](size_t i, double* mag) {
          const double xv = to_double(&x[i * e], dt), bv = to_double(&b[(i % size_t(N)) * e], dt);
          const double yv = 0.5 * to_double(&y[i * e], dt), p = xv + bv + yv;
          *mag = std::fabs(xv) + std::fabs(bv) + std::fabs(yv);
          if (act == "relu") return p > 0 ? p : 0.0;
          *mag = 1;  // sigmoid's output is in (0, 1): an absolute error
          return 1 / (1 + std::exp(-p));
        },
        *O[0]);
  }
  row(op, "fwd", dt.name, shape, c.impl, c.device, s, batch, extra + chk);
  for (bool grad_y : {true, false}) {
    if (!grad_y && !no_grad_y) break;
    s = time_calls(
        [&](int i) {
          const int k = i % sets;
          const DLTensor* in[4] = {&G[k]->t, &X[k]->t, &Y[k]->t, &Bi[k]->t};
          DLTensor* out[3] = {&GX[k]->t, grad_y ? &GY[k]->t : nullptr, &GB[k]->t};
          ck(dlfuse_op_call(c.ab, in, 4, out, 3, attrs, 2, nullptr), "add_mul_activation_backward");
        },
        c.sync, &batch);
    row(op, grad_y ? "bwd" : "bwd_no_grad_y", dt.name, shape, c.impl, c.device, s, batch, extra);
  }
  // ABI 1.1: the same gradients from out (4 arrays moved instead of 5), where the kernel takes it.
  auto from_out = [&](int i) {
    const int k = i % sets;
    const DLTensor* in[5] = {&G[k]->t, nullptr, nullptr, nullptr, &O[k]->t};
    DLTensor* out[3] = {&GX[k]->t, &GY[k]->t, &GB[k]->t};
    return dlfuse_op_call(c.ab, in, 5, out, 3, attrs, 2, nullptr);
  };
  if (from_out(0) == DLFUSE_STATUS_UNSUPPORTED) return;
  s = time_calls([&](int i) { ck(from_out(i), "add_mul_activation_backward(out)"); }, c.sync, &batch);
  row(op, "bwd_from_out", dt.name, shape, c.impl, c.device, s, batch, extra);
}

double gelu_tanh(double p) {
  const double u = std::sqrt(2.0 / M_PI) * (p + 0.044715 * p * p * p);
  return 0.5 * p * (1.0 + std::tanh(u));
}

// ABI 1.1 epilogues on one GEMM shape: matmul_add_activation with GELU (tanh), without and
// with the pre-activation written, its backward from pre; matmul_add_residual.
void bench_matmul_epilogue(Ctx& c, const Dtype& dt, int64_t M, int64_t K, int64_t N, bool residual) {
  const std::string shape = dims_str({M, K, N});
  const size_t set_bytes = size_t(M * K + K * N + 3 * M * N + N) * size_t(dt.size);
  const int sets = sets_for(set_bytes);
  const std::string extra = ", \"sets\": " + std::to_string(sets);
  std::vector<std::unique_ptr<DevTensor>> A, B, Bi, O, P, G;
  for (int s = 0; s < sets; ++s) {
    A.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 2100 + s));
    B.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 2200 + s));
    Bi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 2300 + s));
    O.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 2400 + s));
    P.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 2500 + s));  // pre, or the residual
    G.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 2600 + s));
  }
  dlfuse_attr_t act{};
  act.key = DLFUSE_ATTR_ACTIVATION;
  act.type = DLFUSE_ATTR_INT64;
  act.value.i64 = DLFUSE_ACT_GELU_TANH;
  const std::string op = residual ? "matmul_add_residual" : "matmul_add_activation[gelu_tanh]";
  auto fwd = [&](int i, bool with_pre) {
    const int k = i % sets;
    if (residual) {
      const DLTensor* in[4] = {&A[k]->t, &B[k]->t, &Bi[k]->t, &P[k]->t};
      DLTensor* out[1] = {&O[k]->t};
      ck(dlfuse_op_call(c.mr, in, 4, out, 1, nullptr, 0, nullptr), "matmul_add_residual");
      return;
    }
    const DLTensor* in[3] = {&A[k]->t, &B[k]->t, &Bi[k]->t};
    DLTensor* out[2] = {&O[k]->t, with_pre ? &P[k]->t : nullptr};
    ck(dlfuse_op_call(c.ma, in, 3, out, 2, &act, 1, nullptr), "matmul_add_activation");
  };
  int batch = 0;
  Stats s = time_calls([&](int i) { fwd(i, false); }, c.sync, &batch);
  std::string chk;
  if (c.check) {
    fwd(0, false);
    c.sync();
    const auto a = A[0]->download(), b = B[0]->download(), bi = Bi[0]->download(), r = P[0]->download();
    const size_t e = size_t(dt.size);
    chk = check_outputs(
        c, dt, op + " " + shape, size_t(M * N),
        [&](size_t i, double* mag) {
          const int64_t m = int64_t(i) / N, n = int64_t(i) % N;
          double acc = to_double(&bi[size_t(n) * e], dt);
          *mag = std::fabs(acc);
          for (int64_t k = 0; k < K; ++k) {
            const double p = to_double(&a[size_t(m * K + k) * e], dt) * to_double(&b[size_t(k * N + n) * e], dt);
            acc += p;
            *mag += std::fabs(p);
          }
          if (residual) {
            const double rv = to_double(&r[i * e], dt);
            *mag += std::fabs(rv);
            return acc + rv;
          }
          return gelu_tanh(acc);  // |gelu'| <= 1.13: the sum's magnitude bounds its error
        },
        *O[0]);
  }
  row(op, "fwd", dt.name, shape, c.impl, c.device, s, batch, extra + chk);
  if (residual) return;
  s = time_calls([&](int i) { fwd(i, true); }, c.sync, &batch);
  row(op, "fwd_pre", dt.name, shape, c.impl, c.device, s, batch, extra);
  std::vector<std::unique_ptr<DevTensor>> GA, GB, GBi;
  const int bsets = std::max(1, sets / 2);
  for (int i = 0; i < bsets; ++i) {
    GA.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 2700 + i));
    GB.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 2800 + i));
    GBi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 2900 + i));
  }
  for (int i = 0; i < sets; ++i) fwd(i, true);
  c.sync();
  s = time_calls(
      [&](int i) {
        const int si = i % sets, so = i % bsets;
        const DLTensor* in[5] = {&G[si]->t, &A[si]->t, &B[si]->t, nullptr, &P[si]->t};
        DLTensor* out[3] = {&GA[so]->t, &GB[so]->t, &GBi[so]->t};
        ck(dlfuse_op_call(c.mab, in, 5, out, 3, &act, 1, nullptr), "matmul_add_activation_backward");
      },
      c.sync, &batch);
  row(op, "bwd", dt.name, shape, c.impl, c.device, s, batch, extra);
}

bool has_kernel(dlfuse_op_t op, int32_t device_type, const Dtype& dt) {
  int32_t p = -1;
  return dlfuse_op_resolve(op, device_type, dt.dl, &p) == DLFUSE_STATUS_OK;
}

struct OpsArgs {
  int32_t device_id = 0;
  std::vector<std::string> dtypes{"float32", "bfloat16"}, ops{"matmul_add_relu", "add_mul_activation"},
      activations{"relu"};
  std::string shapes;
  bool large = false, no_grad_y = false, check = true;
};

int cmd_ops(const std::string& path, const OpsArgs& a) {
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, path.c_str()};
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(&opt, &reg), "registry_create");
  int32_t count = 0;
  ck(dlfuse_registry_plugin_count(reg, &count), "plugin_count");
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  if (count < 1 || dlfuse_registry_plugin_info(reg, 0, &info) != DLFUSE_STATUS_OK)
    die("could not load " + path + ": " + dlfuse_last_error());
  if (!info.available || a.device_id >= info.device_count) {
    std::printf(
        "{\"skip\": \"%s\", \"path\": \"%s\", \"reason\": \"%s\"}\n", json_escape(info.name).c_str(),
        json_escape(info.path).c_str(),
        info.available ? ("no device_id " + std::to_string(a.device_id)).c_str() : json_escape(info.reason).c_str());
    dlfuse_registry_destroy(reg);
    return 0;
  }
  Ctx c;
  c.reg = reg;
  c.check = a.check;
  c.dev = DLDevice{static_cast<DLDeviceType>(info.device_type), a.device_id};
  c.impl = std::string("dlfuse_") + info.name;
  const char* dev_names[] = {"", "cpu", "cuda", "cuda_host", "opencl"};
  c.device = (info.device_type >= 1 && info.device_type <= 4 ? dev_names[info.device_type] : "dev") + std::string(":") +
             std::to_string(a.device_id);
  if (info.device_count > 1 || info.device_type == kDLOpenCL) c.impl += ":" + std::to_string(a.device_id);
  std::printf("{\"plugin\": \"%s\", \"version\": \"%s\", \"path\": \"%s\", \"device\": \"%s\", \"device_count\": %d}\n",
              json_escape(info.name).c_str(), json_escape(info.version).c_str(), json_escape(info.path).c_str(),
              c.device.c_str(), info.device_count);
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &c.mf), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, &c.mb), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &c.af), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &c.ab), "op_get");
  c.sync = [&c] { ck(dlfuse_device_synchronize(c.reg, c.dev, nullptr), "device_synchronize"); };
  const auto want = [&](const char* op) { return std::find(a.ops.begin(), a.ops.end(), op) != a.ops.end(); };
  // ABI 1.1 ops: only when asked for (a plugin may not offer them: NOT_FOUND).
  if (want(DLFUSE_OP_MATMUL_ADD_ACTIVATION) &&
      (dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION, &c.ma) != DLFUSE_STATUS_OK ||
       dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, &c.mab) != DLFUSE_STATUS_OK))
    c.ma = c.mab = nullptr;
  if (want(DLFUSE_OP_MATMUL_ADD_RESIDUAL) &&
      dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL, &c.mr) != DLFUSE_STATUS_OK)
    c.mr = nullptr;

  std::vector<std::vector<int64_t>> shapes;
  if (!a.shapes.empty())
    shapes = parse_shapes(a.shapes);
  else if (g_mode == Mode::smoke)
    shapes = {{64, 32, 16}, {64, 32}};
  else
    shapes = {{2048, 512, 256}, {4096, 1024, 1024}, {2048, 512}, {16384, 8192}};
  if (a.shapes.empty() && a.large && g_mode != Mode::smoke)
    shapes.insert(shapes.begin() + 2, std::vector<int64_t>{8192, 4096, 4096});
  for (const std::string& o : a.ops)
    if (o != "matmul_add_relu" && o != "add_mul_activation" && o != DLFUSE_OP_MATMUL_ADD_ACTIVATION &&
        o != DLFUSE_OP_MATMUL_ADD_RESIDUAL)
      die("unknown op '" + o +
          "' (expected matmul_add_relu, add_mul_activation, matmul_add_activation or "
          "matmul_add_residual)");
  for (const std::string& act : a.activations)
    if (act != "relu" && act != "sigmoid") die("unknown activation '" + act + "' (expected relu or sigmoid)");
  for (auto& s : shapes)
    if (s.size() != 2 && s.size() != 3) die("shape " + dims_str(s) + ": expected MxKxN (matmul) or MxN (add_mul)");
  for (const std::string& dn : a.dtypes) {
    const Dtype& dt = *find_dtype(dn);
    if (!has_kernel(c.mf, info.device_type, dt) || !has_kernel(c.af, info.device_type, dt)) {
      std::printf("{\"skip\": \"%s\", \"dtype\": \"%s\", \"reason\": \"no kernel for this dtype\"}\n", info.name,
                  dt.name);
      continue;
    }
    for (auto& s : shapes) {
      if (s.size() == 3 && want("matmul_add_relu")) bench_matmul(c, dt, s[0], s[1], s[2]);
      if (s.size() == 3 && c.ma && has_kernel(c.ma, info.device_type, dt) && has_kernel(c.mab, info.device_type, dt))
        bench_matmul_epilogue(c, dt, s[0], s[1], s[2], false);
      if (s.size() == 3 && c.mr && has_kernel(c.mr, info.device_type, dt))
        bench_matmul_epilogue(c, dt, s[0], s[1], s[2], true);
      if (s.size() == 2 && want("add_mul_activation"))
        for (const std::string& act : a.activations) bench_add_mul(c, dt, s[0], s[1], act, a.no_grad_y);
    }
  }
  dlfuse_registry_destroy(reg);
  return g_check_failed ? 3 : 0;
}

// ---- dispatch overhead ------------------------------------------------------------------

int cmd_dispatch(const std::string& path) {
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, path.c_str()};
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(&opt, &reg), "registry_create");
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  ck(dlfuse_registry_plugin_info(reg, 0, &info), "plugin_info");
  if (!info.available || std::strcmp(info.name, "noop") != 0)
    die(path + " is not an available no-op plugin: " + (info.available ? info.name : info.reason));

  // Host tensors of the anchors' shapes, in real (untouched) memory: validation does the
  // work a real call needs, which does not depend on the sizes; the kernels read nothing.
  std::vector<int64_t> s_mn{2048, 512}, s_n{512}, s_mk{2048, 256}, s_kn{256, 512};
  std::vector<std::vector<float>> mem;
  auto mk = [&mem](std::vector<int64_t>& shape) {
    mem.emplace_back(size_t(shape[0]) * size_t(shape.size() > 1 ? shape[1] : 1));
    DLTensor t{};
    t.data = mem.back().data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    return t;
  };
  std::vector<int64_t> s_half{1024, 512};
  mem.reserve(12);
  DLTensor x = mk(s_mn), y = mk(s_mn), bias = mk(s_n), out = mk(s_mn), a = mk(s_mk), b = mk(s_kn);
  // The registry remembers each thread's last 8 valid layouts per op and then checks only
  // pointers: `_new_data` alternates two sets of buffers of one layout (a training step's
  // fresh allocations), `_2_layouts` alternates two layouts (both remembered),
  // `_9_layouts` cycles through nine [128 k, 512] views of x, y, out: each call misses.
  DLTensor x2 = mk(s_mn), y2 = mk(s_mn), out2 = mk(s_mn), xh = mk(s_half), yh = mk(s_half), outh = mk(s_half);
  constexpr int kCycle = 9;
  int64_t s_cycle[kCycle][2];
  DLTensor xc[kCycle], yc[kCycle], outc[kCycle];
  const DLTensor* am_inc[kCycle][3];
  DLTensor* am_outc[kCycle][1];
  for (int k = 0; k < kCycle; ++k) {
    s_cycle[k][0] = 128 * (k + 1);
    s_cycle[k][1] = 512;
    xc[k] = x, yc[k] = y, outc[k] = out;
    xc[k].shape = yc[k].shape = outc[k].shape = s_cycle[k];
    am_inc[k][0] = &xc[k], am_inc[k][1] = &yc[k], am_inc[k][2] = &bias;
    am_outc[k][0] = &outc[k];
  }
  dlfuse_op_t am, mm, noop;
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &am), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &mm), "op_get");
  ck(dlfuse_op_get(reg, "noop", &noop), "op_get");
  dlfuse_attr_t attrs[2] = {};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION;
  attrs[0].type = DLFUSE_ATTR_INT64;
  attrs[0].value.i64 = DLFUSE_ACT_RELU;
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
  attrs[1].type = DLFUSE_ATTR_FLOAT64;
  attrs[1].value.f64 = 0.5;
  const DLTensor* am_in[3] = {&x, &y, &bias};
  DLTensor* am_out[1] = {&out};
  const DLTensor* am_in2[3] = {&x2, &y2, &bias};
  DLTensor* am_out2[1] = {&out2};
  const DLTensor* am_inh[3] = {&xh, &yh, &bias};
  DLTensor* am_outh[1] = {&outh};
  const DLTensor* mm_in[3] = {&a, &b, &bias};
  DLTensor* mm_out[1] = {&out};
  const DLTensor* n_in[1] = {&x};
  DLTensor* n_out[1] = {&out};

  // The floor: the same kernel called straight through its function pointer (own dlopen).
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) die(std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<dlfuse_plugin_entry_fn_t>(dlsym(h, DLFUSE_PLUGIN_ENTRY));
  if (!entry) die("no entry symbol in " + path);
  const dlfuse_plugin_t* api = entry();
  void* state = nullptr;
  char err[256];
  if (api->open(nullptr, &state, err, sizeof err) != DLFUSE_STATUS_OK) die(err);
  const dlfuse_kernel_t* ks = nullptr;
  int32_t nk = 0;
  api->get_kernels(state, &ks, &nk, err, sizeof err);
  dlfuse_kernel_t direct = ks[2];  // add_mul_activation
  dlfuse_kernel_args_t args{};
  args.struct_size = sizeof args;
  args.op = DLFUSE_OP_ADD_MUL_ACTIVATION;
  args.inputs = am_in;
  args.num_inputs = 3;
  args.outputs = am_out;
  args.num_outputs = 1;
  args.attrs = attrs;
  args.num_attrs = 2;
  args.err = err;
  args.err_size = sizeof err;
  dlfuse_kernel_fn_t volatile fn = direct.fn;  // volatile: a real indirect call every time

  const int n = g_mode == Mode::smoke ? 1000 : g_mode == Mode::quick ? 100000 : 1000000;
  const int rounds = g_mode == Mode::smoke ? 3 : 15;
  struct Case {
    const char* name;
    std::function<int()> fn;  // returns the OR of the statuses of n calls
  };
  const std::vector<Case> cases = {
      {"direct_kernel_call",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= fn(state, direct.kernel_data, &args);
         return st;
       }},
      {"op_call_generic_op",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(noop, n_in, 1, n_out, 1, nullptr, 0, nullptr);
         return st;
       }},
      {"op_call_add_mul_activation",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
         return st;
       }},
      {"op_call_add_mul_activation_new_data",
       [&] {
         int st = 0;
         for (int i = 0; i < n; i += 2) {
           st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
           st |= dlfuse_op_call(am, am_in2, 3, am_out2, 1, attrs, 2, nullptr);
         }
         return st;
       }},
      {"op_call_add_mul_activation_2_layouts",
       [&] {
         int st = 0;
         for (int i = 0; i < n; i += 2) {
           st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
           st |= dlfuse_op_call(am, am_inh, 3, am_outh, 1, attrs, 2, nullptr);
         }
         return st;
       }},
      {"op_call_add_mul_activation_9_layouts",
       [&] {
         int st = 0;
         for (int i = 0, k = 0; i < n; ++i, k = k + 1 == kCycle ? 0 : k + 1)
           st |= dlfuse_op_call(am, am_inc[k], 3, am_outc[k], 1, attrs, 2, nullptr);
         return st;
       }},
      {"typed_add_mul_activation",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i)
           st |= dlfuse_add_mul_activation(reg, &x, &y, &bias, 0.5, DLFUSE_ACT_RELU, &out, nullptr);
         return st;
       }},
      {"op_call_matmul_add_relu",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(mm, mm_in, 3, mm_out, 1, nullptr, 0, nullptr);
         return st;
       }},
      {"typed_matmul_add_relu",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_matmul_add_relu(reg, &a, &b, &bias, &out, 0, nullptr);
         return st;
       }},
  };
  for (const Case& cs : cases) {
    if (!g_only.empty() && std::string(cs.name).find(g_only) == std::string::npos) continue;
    if (cs.fn() != 0) die(std::string(cs.name) + ": a call failed: " + dlfuse_last_error());
    std::vector<double> ns;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = now_s();
      const int st = cs.fn();
      ns.push_back((now_s() - t0) / n * 1e9);
      if (st != 0) die(std::string(cs.name) + ": a call failed: " + dlfuse_last_error());
    }
    const Stats s = stats_of(ns);
    std::printf(
        "{\"dispatch\": \"%s\", \"median_ns\": %.2f, \"p10_ns\": %.2f, \"p90_ns\": %.2f, \"min_ns\": %.2f, "
        "\"calls_per_round\": %d, \"rounds\": %d}\n",
        cs.name, s.median, s.p10, s.p90, s.min, n, s.n);
    std::fflush(stdout);
    std::fprintf(stderr, "  dispatch %-30s median %8.1f ns/call [p10 %.1f, p90 %.1f]\n", cs.name, s.median, s.p10,
                 s.p90);
  }
  api->close(state);
  dlclose(h);
  dlfuse_registry_destroy(reg);
  return 0;
}

// ---- CPU copy ceiling ----------------------------------------------------------------------

int cmd_copy_bw() {
  const size_t bytes = g_mode == Mode::smoke ? (size_t(4) << 20) : (size_t(512) << 20);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<char> src(bytes, 1), dst(bytes, 2);  // touched: pages are mapped before timing
  const int rounds = g_mode == Mode::smoke ? 3 : g_mode == Mode::quick ? 5 : 15;
  auto copy_all = [&](unsigned nt) {
    std::vector<std::thread> pool;
    const size_t chunk = bytes / nt;
    for (unsigned t = 0; t < nt; ++t)
      pool.emplace_back([&, t] {
        const size_t off = t * chunk, len = t + 1 == nt ? bytes - off : chunk;
        std::memcpy(dst.data() + off, src.data() + off, len);
      });
    for (auto& th : pool) th.join();
  };
  for (unsigned nt : {1u, threads}) {
    copy_all(nt);
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = now_s();
      copy_all(nt);
      v.push_back(now_s() - t0);
    }
    const Stats s = stats_of(v);
    // Bytes moved = read + written (2 x bytes), as for the GPU's device-to-device copy.
    std::printf(
        "{\"ceiling\": \"copy_bw\", \"device\": \"cpu:0\", \"impl\": \"memcpy_%u_threads\", \"bytes\": %zu, "
        "\"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, \"GBps\": %.3f, \"GBps_p10\": %.3f, "
        "\"GBps_p90\": %.3f}\n",
        nt, 2 * bytes, s.median * 1e3, s.p10 * 1e3, s.p90 * 1e3, 2.0 * double(bytes) / s.median / 1e9,
        2.0 * double(bytes) / s.p90 / 1e9, 2.0 * double(bytes) / s.p10 / 1e9);
    std::fflush(stdout);
    std::fprintf(stderr, "  memcpy %u thread(s): %.2f GB/s (read + written)\n", nt,
                 2.0 * double(bytes) / s.median / 1e9);
    if (threads == 1) break;
  }
  return 0;
}

int cmd_list() {
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(nullptr, &reg), "registry_create");
  int32_t count = 0;
  ck(dlfuse_registry_plugin_count(reg, &count), "plugin_count");
  for (int32_t i = 0; i < count; ++i) {
    dlfuse_plugin_info_t info{};
    info.struct_size = sizeof info;
    ck(dlfuse_registry_plugin_info(reg, i, &info), "plugin_info");
    std::printf(
        "{\"name\": \"%s\", \"path\": \"%s\", \"available\": %d, \"reason\": \"%s\", \"device_type\": %d, "
        "\"device_count\": %d, \"version\": \"%s\"}\n",
        json_escape(info.name).c_str(), json_escape(info.path).c_str(), info.available,
        json_escape(info.reason).c_str(), info.device_type, info.device_count, json_escape(info.version).c_str());
  }
  dlfuse_registry_destroy(reg);
  return 0;
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: dlfuse_bench list\n"
               "       dlfuse_bench ops PLUGIN.so [--device-id I] [--dtypes float32,bfloat16] [--ops LIST]\n"
               "                    [--shapes MxKxN,MxN,...] [--activations relu,sigmoid] [--large] [--no-grad-y]\n"
               "                    [--no-check] [--mode M]\n"
               "       dlfuse_bench dispatch NOOP.so [--mode M] [--only SUBSTR]\n"
               "       dlfuse_bench copy-bw [--mode M]\n"
               "M is smoke (tiny shapes, 3 rounds: for the test suite), quick or full (default)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string cmd = argv[1];
  std::string path;
  OpsArgs a;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    const bool has_value = i + 1 < argc;
    if (s == "--mode" && has_value) {
      if (!parse_mode(argv[++i])) usage();
    } else if (s == "--device-id" && has_value) {
      a.device_id = int32_t(std::atoi(argv[++i]));
    } else if (s == "--dtypes" && has_value) {
      a.dtypes = split_list(argv[++i]);
    } else if (s == "--ops" && has_value) {
      a.ops = split_list(argv[++i]);
    } else if (s == "--activations" && has_value) {
      a.activations = split_list(argv[++i]);
    } else if (s == "--shapes" && has_value) {
      a.shapes = argv[++i];
    } else if (s == "--only" && has_value) {
      g_only = argv[++i];
    } else if (s == "--large") {
      a.large = true;
    } else if (s == "--no-grad-y") {
      a.no_grad_y = true;
    } else if (s == "--no-check") {
      a.check = false;
    } else if (!s.empty() && s[0] != '-' && path.empty()) {
      path = s;
    } else {
      usage();
    }
  }
  if (!path.empty()) {  // the registry takes absolute paths only (it never searches the cwd)
    char* abs = realpath(path.c_str(), nullptr);
    if (!abs) die("no such plugin file: " + path);
    path = abs;
    std::free(abs);
  }
  if (cmd == "list") return cmd_list();
  if (cmd == "copy-bw") return cmd_copy_bw();
  if (cmd == "ops" && !path.empty()) return cmd_ops(path, a);
  if (cmd == "dispatch" && !path.empty()) return cmd_dispatch(path);
  usage();
}
