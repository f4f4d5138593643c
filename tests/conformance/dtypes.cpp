#include "dtypes.h"

#include <cmath>
#include <cstring>

namespace dlfuse_conformance {
namespace {

// A binary float format with `mant` explicit mantissa bits and exponent bias `bias`.
struct Format {
  int mant, exp_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
};
constexpr Format kHalf{10, 5}, kBf16{7, 8};

// Exact rounding from double (never through float, which would round twice).
uint16_t to_small(double v, Format f) {
  const uint16_t sign = std::signbit(v) ? uint16_t(1u << 15) : 0;
  const uint16_t exp_all = uint16_t(((1u << f.exp_bits) - 1) << f.mant);
  if (std::isnan(v)) return uint16_t(sign | exp_all | (1u << (f.mant - 1)));
  const double a = std::fabs(v);
  if (std::isinf(a)) return uint16_t(sign | exp_all);
  const int emin = 1 - f.bias();  // exponent of the smallest normal
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // a = 1.xxx * 2^exp
  if (a == 0.0 || exp < emin) {
    // Subnormal: a multiple of 2^(emin - mant); q == 2^mant carries into the smallest normal.
    const double q = std::nearbyint(a * pow2(f.mant - emin));
    return uint16_t(sign | uint16_t(q));
  }
  // Exact: a scaled into [2^mant, 2^(mant+1)) by a power of two in range.
  double q = std::nearbyint(a * pow2(f.mant - exp));  // in [2^mant, 2^(mant+1)]
  if (q >= pow2(f.mant + 1)) {
    q /= 2;
    ++exp;
  }
  if (exp > f.bias()) return uint16_t(sign | exp_all);  // overflow
  const uint32_t mant_bits = uint32_t(q) - (1u << f.mant);
  return uint16_t(sign | (uint32_t(exp + f.bias()) << f.mant) | mant_bits);
}

double from_small(uint16_t b, Format f) {
  const double sign = (b >> 15) ? -1.0 : 1.0;
  const int exp = (b >> f.mant) & ((1 << f.exp_bits) - 1);
  const int mant = b & ((1 << f.mant) - 1);
  if (exp == (1 << f.exp_bits) - 1) return mant ? std::nan("") : sign * INFINITY;
  if (exp == 0) return sign * (double(mant) * pow2(1 - f.bias() - f.mant));
  return sign * (double(mant + (1 << f.mant)) * pow2(exp - f.bias() - f.mant));
}

bool is(DLDataType dt, int code, int bits) { return dt.code == code && dt.bits == bits && dt.lanes == 1; }

}  // namespace

double pow2(int k) {
  const uint64_t bits = uint64_t(k + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

bool same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

std::string dtype_name(DLDataType dt) {
  if (is(dt, kDLFloat, 32)) return "float32";
  if (is(dt, kDLFloat, 64)) return "float64";
  if (is(dt, kDLFloat, 16)) return "float16";
  if (is(dt, kDLBfloat, 16)) return "bfloat16";
  return std::to_string(dt.code) + ":" + std::to_string(dt.bits) + ":" + std::to_string(dt.lanes);
}

bool parse_dtype(const std::string& s, DLDataType* dt) {
  if (s == "f32" || s == "float32")
    *dt = DLDataType{kDLFloat, 32, 1};
  else if (s == "f64" || s == "float64")
    *dt = DLDataType{kDLFloat, 64, 1};
  else if (s == "f16" || s == "float16")
    *dt = DLDataType{kDLFloat, 16, 1};
  else if (s == "bf16" || s == "bfloat16")
    *dt = DLDataType{kDLBfloat, 16, 1};
  else
    return false;
  return true;
}

bool dtype_supported(DLDataType dt) {
  return is(dt, kDLFloat, 32) || is(dt, kDLFloat, 64) || is(dt, kDLFloat, 16) || is(dt, kDLBfloat, 16);
}

size_t dtype_size(DLDataType dt) { return size_t(dt.bits) * dt.lanes / 8; }

void encode(double v, DLDataType dt, void* dst) {
  if (is(dt, kDLFloat, 64)) {
    std::memcpy(dst, &v, 8);
  } else if (is(dt, kDLFloat, 32)) {
    const float f = float(v);  // the hardware conversion rounds to nearest even
    std::memcpy(dst, &f, 4);
  } else {
    const uint16_t b = to_small(v, is(dt, kDLFloat, 16) ? kHalf : kBf16);
    std::memcpy(dst, &b, 2);
  }
}

double decode(const void* src, DLDataType dt) {
  if (is(dt, kDLFloat, 64)) {
    double d;
    std::memcpy(&d, src, 8);
    return d;
  }
  if (is(dt, kDLFloat, 32)) {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  return from_small(b, is(dt, kDLFloat, 16) ? kHalf : kBf16);
}

double round_to(double v, DLDataType dt) {
  unsigned char buf[8];
  encode(v, dt, buf);
  return decode(buf, dt);
}

Tolerance tolerance_for(DLDataType dt, bool allow_tf32) {
  // float64: a kernel's sum and the reference's, each of n terms in any order, differ by
  // at most 2(n - 1) u Σ|term| (u = 2^-53); 1e-11 covers n <= 45000, the suite's longest
  // float64 sum being 24000 terms (the sweep's output budget).
  if (is(dt, kDLFloat, 64)) return {1e-11, 1e-300};
  if (is(dt, kDLFloat, 16)) return {4e-3, 1e-3};
  if (is(dt, kDLBfloat, 16)) return {1.6e-2, 1e-2};
  if (allow_tf32) return {1.6e-2, 1e-6};
  return {2e-5, 1e-6};
}

}  // namespace dlfuse_conformance
