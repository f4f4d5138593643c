// add_mul_activation on large tensors in float32, bfloat16 and float16: outputs above
// 16 MiB (streaming stores), rows split over the OpenMP threads, rows whose length is not
// a multiple of the vector (a first vector cut to alignment and a masked tail in every
// row), and few long rows (threads split columns). The conformance cases are too small
// for any of these. Every output is poisoned first and checked against a float64
// reference; inputs are multiples of 1/64 below 4 in magnitude, exact in every dtype, so
// the only error is the output's one rounding (tolerance: half an ulp of the dtype, as a
// relative bound, doubled).
// Usage: onednn_large_test /absolute/path/libdlfuse_onednn.so
#include <dlfuse/dlfuse.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

enum class Dt { kF32, kBF16, kF16 };
const char* name_of(Dt d) { return d == Dt::kF32 ? "float32" : d == Dt::kBF16 ? "bfloat16" : "float16"; }

float half_to_float(uint16_t h) {  // exact for the normal halves and zeros the test uses
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0 && m == 0) {
    float f;
    std::memcpy(&f, &sign, 4);
    return f;
  }
  if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
  if (e == 0) return (sign ? -1.f : 1.f) * float(m) * 5.9604644775390625e-8f;
  const uint32_t u = sign | ((e + 112u) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_half_exact(float f) {  // only for values exact in half (the inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a == 0) return sign;
  return uint16_t(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}

struct Tensor {
  Dt dt;
  std::vector<int64_t> shape;
  std::vector<uint32_t> store;  // room for float32 or 16-bit elements
  DLTensor t{};
  Tensor(Dt d, std::vector<int64_t> s) : dt(d), shape(std::move(s)) {
    store.assign(size_t(numel()) + 1, 0xffffffffu);  // poison: NaN in every dtype
    t.data = store.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dt == Dt::kF32    ? DLDataType{kDLFloat, 32, 1}
              : dt == Dt::kBF16 ? DLDataType{kDLBfloat, 16, 1}
                                : DLDataType{kDLFloat, 16, 1};
    t.shape = shape.data();
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float get(int64_t i) const {
    if (dt == Dt::kF32) {
      float f;
      std::memcpy(&f, reinterpret_cast<const char*>(store.data()) + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, reinterpret_cast<const char*>(store.data()) + 2 * i, 2);
    if (dt == Dt::kF16) return half_to_float(h);
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void set(int64_t i, float f) {  // f exact in the dtype
    char* p = reinterpret_cast<char*>(store.data());
    if (dt == Dt::kF32) return void(std::memcpy(p + 4 * i, &f, 4));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t h = dt == Dt::kBF16 ? uint16_t(u >> 16) : float_to_half_exact(f);
    std::memcpy(p + 2 * i, &h, 2);
  }
  // Values k / 64 (|k| < 256), or k / 256 (0 <= k < 256) for an activation's output.
  void fill(unsigned seed, bool unit = false) {
    unsigned x = seed * 2654435761u + 7u;
    for (int64_t i = 0; i < numel(); ++i) {
      x = x * 1664525u + 1013904223u;
      const int k = int(x >> 8) % 511 - 255;
      set(i, unit ? float(std::abs(k)) / 256.f : float(k) / 64.f);
    }
  }
};

int g_failures = 0;

double tol_of(Dt d) { return d == Dt::kF32 ? 1.2e-7 : d == Dt::kBF16 ? 7.9e-3 : 9.8e-4; }

void expect(const std::string& what, const Tensor& got, const std::vector<double>& ref) {
  const double tol = tol_of(got.dt);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = got.get(int64_t(i));
    if (!(std::fabs(v - ref[i]) <= tol * std::fabs(ref[i]) + 1e-30)) {
      std::printf("FAIL %s[%zu]: got %.9g, expected %.9g\n", what.c_str(), i, v, ref[i]);
      ++g_failures;
      return;
    }
  }
}

void ok(dlfuse_status_t st, const std::string& what) {
  if (st != DLFUSE_STATUS_OK) {
    std::printf("FAIL %s: %s\n", what.c_str(), dlfuse_last_error());
    ++g_failures;
  }
}

// Forward and both backwards of one shape; bias is a row over N, one value, or full.
void check_shape(dlfuse_registry_t reg, Dt dt, int64_t M, int64_t N, int bias_kind) {
  const std::vector<int64_t> bshape = bias_kind == 0   ? std::vector<int64_t>{N}
                                      : bias_kind == 1 ? std::vector<int64_t>{1}
                                                       : std::vector<int64_t>{M, N};
  const std::string tag = std::string(name_of(dt)) + " " + std::to_string(M) + "x" + std::to_string(N) + " bias" +
                          std::to_string(bias_kind);
  Tensor x(dt, {M, N}), y(dt, {M, N}), b(dt, bshape), g(dt, {M, N}), out(dt, {M, N});
  Tensor gx(dt, {M, N}), gy(dt, {M, N}), gb(dt, bshape);
  x.fill(1), y.fill(2), b.fill(3), g.fill(4);
  const float mult = 0.5f;
  auto bias_at = [&](int64_t i) { return double(b.get(bias_kind == 0 ? i % N : bias_kind == 1 ? 0 : i)); };
  const size_t total = size_t(M * N);
  std::vector<double> ref(total), rgx(total), rgy(total), rgb(size_t(b.numel()), 0.0);
  for (int64_t i = 0; i < M * N; ++i) {
    const double p = double(x.get(i)) + bias_at(i) + double(mult) * double(y.get(i));
    ref[size_t(i)] = p > 0 ? p : 0.0;
    rgx[size_t(i)] = p > 0 ? double(g.get(i)) : 0.0;
    rgy[size_t(i)] = double(mult) * rgx[size_t(i)];
    rgb[size_t(bias_kind == 0 ? i % N : bias_kind == 1 ? 0 : i)] += rgx[size_t(i)];
  }
  ok(dlfuse_add_mul_activation(reg, &x.t, &y.t, &b.t, mult, DLFUSE_ACT_RELU, &out.t, nullptr), tag + " fwd");
  expect(tag + " out", out, ref);
  ok(dlfuse_add_mul_activation_backward(reg, &g.t, &x.t, &y.t, &b.t, mult, DLFUSE_ACT_RELU, &gx.t, &gy.t, &gb.t,
                                        nullptr),
     tag + " bwd");
  expect(tag + " grad_x", gx, rgx);
  expect(tag + " grad_y", gy, rgy);
  expect(tag + " grad_bias", gb, rgb);

  // From out, sigmoid: d = g * out * (1 - out); out holds values in [0, 1).
  Tensor o(dt, {M, N}), hx(dt, {M, N}), hy(dt, {M, N}), hb(dt, bshape);
  o.fill(5, true);
  std::fill(rgb.begin(), rgb.end(), 0.0);
  for (int64_t i = 0; i < M * N; ++i) {
    const float ov = o.get(i);
    const double d = double(g.get(i) * (ov * (1.f - ov)));  // float32 math, as documented
    rgx[size_t(i)] = d;
    rgy[size_t(i)] = double(mult) * d;
    rgb[size_t(bias_kind == 0 ? i % N : bias_kind == 1 ? 0 : i)] += d;
  }
  ok(dlfuse_add_mul_activation_backward_from_out(reg, &g.t, &o.t, mult, DLFUSE_ACT_SIGMOID, &hx.t, &hy.t, &hb.t,
                                                 nullptr),
     tag + " bwd from out");
  expect(tag + " from_out grad_x", hx, rgx);
  expect(tag + " from_out grad_y", hy, rgy);
  expect(tag + " from_out grad_bias", hb, rgb);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '/') {
    std::fprintf(stderr, "usage: %s /absolute/path/libdlfuse_onednn.so\n", argv[0]);
    return 2;
  }
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, argv[1]};
  dlfuse_registry_t reg = nullptr;
  if (dlfuse_registry_create(&opt, &reg) != DLFUSE_STATUS_OK) return 2;
  for (Dt dt : {Dt::kF32, Dt::kBF16, Dt::kF16}) {
    check_shape(reg, dt, 2049, 4100, 0);  // 8.4 M elements: 16+ MiB in 16 bits; rows of 4100
    check_shape(reg, dt, 3, 2800003, 0);  // few long rows: threads split columns
    check_shape(reg, dt, 1031, 8200, 1);  // a scalar bias: one flat range
    check_shape(reg, dt, 1031, 8200, 2);  // a full bias
  }
  dlfuse_registry_destroy(reg);
  if (g_failures) {
    std::printf("FAIL: %d wrong results or failed calls\n", g_failures);
    return 1;
  }
  std::printf("PASS: large add_mul_activation in float32, bfloat16, float16\n");
  return 0;
}
