// Storage types of the test plugin and their conversion to the accumulation type.
// float16/bfloat16 are converted by hand (round to nearest even, NaN kept a NaN) so the
// plugin depends on nothing but the public headers.
#ifndef DLFUSE_TESTREF_SCALAR_H_
#define DLFUSE_TESTREF_SCALAR_H_

#include <cstdint>
#include <cstring>

namespace testref {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24 is exact in float
    float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf, NaN payload kept
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);                        // >= 65520 rounds to Inf (tie to even)
  if (a >= 0x38800000u) {                                                       // a normal half
    uint32_t h = ((((a >> 23) - 127 + 15)) << 10) | ((a & 0x7fffffu) >> 13);
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
    return uint16_t(sign | h);
  }
  const uint32_t e = a >> 23;
  if (e == 0) return sign;  // float subnormals are far below half's smallest subnormal
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // value * 2^24 = m >> shift
  if (shift > 25) return sign;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  // overflow rounds to Inf, as it should
}

// load/store between a storage element and the accumulation type Acc.
template <class T, class Acc>
struct Convert;
template <class Acc>
struct Convert<float, Acc> {
  static Acc load(const void* p) {
    float v;
    std::memcpy(&v, p, 4);
    return Acc(v);
  }
  static void store(void* p, Acc v) {
    float f = float(v);
    std::memcpy(p, &f, 4);
  }
};
template <class Acc>
struct Convert<double, Acc> {
  static Acc load(const void* p) {
    double v;
    std::memcpy(&v, p, 8);
    return Acc(v);
  }
  static void store(void* p, Acc v) {
    double d = double(v);
    std::memcpy(p, &d, 8);
  }
};
template <class Acc>
struct Convert<Half, Acc> {
  static Acc load(const void* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return Acc(half_to_float(h));
  }
  static void store(void* p, Acc v) {
    uint16_t h = float_to_half(float(v));
    std::memcpy(p, &h, 2);
  }
};
template <class Acc>
struct Convert<BFloat16, Acc> {
  static Acc load(const void* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return Acc(bf16_to_float(h));
  }
  static void store(void* p, Acc v) {
    uint16_t h = float_to_bf16(float(v));
    std::memcpy(p, &h, 2);
  }
};

// v rounded to the storage type T and back (used by mutants that accumulate in T).
template <class T, class Acc>
Acc storage_round(Acc v) {
  unsigned char b[8];
  Convert<T, Acc>::store(b, v);
  return Convert<T, Acc>::load(b);
}

// A float rounded to TF32's 10 mantissa bits (used by the TF32 mutant).
inline float tf32_round(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // Inf, NaN
  return bits_float((u + 0x1000u) & ~0x1fffu);
}

}  // namespace testref

#endif
