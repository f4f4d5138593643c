// dtype conversion and strided copies. bf16/f16 calls run on compact float32 copies: oneDNN
// 2.6.3 creates no bf16/f16 matmul, binary or eltwise primitive on a CPU without
// AVX-512 (it reports "could not create a primitive descriptor"), so the plugin converts
// at the edges and accumulates in float32, which docs/ops.md asks for anyway.
#include <immintrin.h>

#include "common.h"
#include "loops.h"

namespace dlfuse_onednn {
namespace {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_load(uint16_t b) { return float_of(uint32_t(b) << 16); }
inline uint16_t bf16_store(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  // round to nearest even
}

// IEEE half <-> float in software, for CPUs without F16C and for loop tails.
inline float f16_load(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}
inline uint16_t f16_store(float f) {
  const uint32_t u = bits_of(f), a = u & 0x7fffffffu;
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to Inf
  if (a >= 0x38800000u) {                                 // normal half
    uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    const uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

bool cpu_has_f16c() {
  __builtin_cpu_init();  // this may run from a static initializer: make sure the CPU model is read
  return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}
const bool kHasF16C = cpu_has_f16c();

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_load(s[i]);
}
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = f16_store(s[i]);
}

// Calls row(i, src_offset, dst_offset) for every row (all dims but the last) of `shape`,
// rows spread over the OpenMP threads.
template <class F>
void for_rows(const std::vector<int64_t>& shape, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb,
              F&& row) {
  const int r = int(shape.size());
  int64_t rows = 1;
  for (int i = 0; i + 1 < r; ++i) rows *= shape[i];
  const int64_t n = r ? shape[r - 1] : 1;
  if (rows == 0 || n == 0) return;
#pragma omp parallel for schedule(static) if (rows * n > (1 << 15))
  for (int64_t i = 0; i < rows; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = r - 2; d >= 0; --d) {
      const int64_t idx = rem % shape[d];
      rem /= shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    row(oa, ob, n);
  }
}

// The strides of a DLTensor (NULL = compact).
std::vector<int64_t> strides_of(const DLTensor* t) {
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  if (t->strides) return std::vector<int64_t>(t->strides, t->strides + t->ndim);
  return compact_strides(shape);
}

}  // namespace

Storage storage_of(DLDataType dt) {
  if (dt.lanes == 1 && dt.code == kDLFloat && dt.bits == 32) return Storage::kF32;
  if (dt.lanes == 1 && dt.code == kDLBfloat && dt.bits == 16) return Storage::kBF16;
  if (dt.lanes == 1 && dt.code == kDLFloat && dt.bits == 16) return Storage::kF16;
  throw Error(DLFUSE_STATUS_UNSUPPORTED, "dtype: expected float32, bfloat16 or float16, got code " +
                                             std::to_string(dt.code) + " bits " + std::to_string(dt.bits) + " lanes " +
                                             std::to_string(dt.lanes));
}

View input_f32(const DLTensor* t, Storage s, Buffer& buf) {
  if (s == Storage::kF32) return view_of(t);
  const std::vector<int64_t> shape(t->shape, t->shape + t->ndim), ss = strides_of(t);
  View v = compact_view(buf, shape);
  const uint16_t* src = reinterpret_cast<const uint16_t*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
  const int r = int(shape.size());
  const int64_t inner = r ? ss[r - 1] : 1, dinner = 1;
  float* dst = v.data;
  const bool bf = s == Storage::kBF16;
  for_rows(shape, ss, v.strides, [&](int64_t os, int64_t od, int64_t n) {
    const uint16_t* p = src + os;
    float* q = dst + od;
    if (inner == 1 && !bf && kHasF16C) return f16_to_f32_f16c(p, q, n);
    if (inner == 1 && bf) return loops::bf16_to_f32(q, p, n);
    for (int64_t j = 0; j < n; ++j) q[j * dinner] = bf ? bf16_load(p[j * inner]) : f16_load(p[j * inner]);
  });
  return v;
}

View output_f32(const DLTensor* t, Storage s, Buffer& buf) {
  if (s == Storage::kF32) return view_of(t);
  return compact_view(buf, std::vector<int64_t>(t->shape, t->shape + t->ndim));
}

void store_output(const View& f, DLTensor* t, Storage s) {
  if (s == Storage::kF32) return;
  const std::vector<int64_t> ds = strides_of(t);
  uint16_t* dst = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
  const int r = f.rank();
  const int64_t inner = r ? ds[r - 1] : 1;
  const bool bf = s == Storage::kBF16;
  for_rows(f.shape, f.strides, ds, [&](int64_t os, int64_t od, int64_t n) {
    const float* p = f.data + os;
    uint16_t* q = dst + od;
    const int64_t is = r ? f.strides[r - 1] : 1;
    if (inner == 1 && is == 1 && !bf && kHasF16C) return f32_to_f16_f16c(p, q, n);
    if (inner == 1 && is == 1 && bf) return loops::f32_to_bf16(q, p, n);
    for (int64_t j = 0; j < n; ++j) q[j * inner] = bf ? bf16_store(p[j * is]) : f16_store(p[j * is]);
  });
}

void copy_view(const View& src, const View& dst) {
  const int r = src.rank();
  for_rows(src.shape, src.strides, dst.strides, [&](int64_t os, int64_t od, int64_t n) {
    const float* p = src.data + os;
    float* q = dst.data + od;
    const int64_t a = r ? src.strides[r - 1] : 1, b = r ? dst.strides[r - 1] : 1;
    if (a == 1 && b == 1) {
      std::memcpy(q, p, size_t(n) * sizeof(float));
      return;
    }
    for (int64_t j = 0; j < n; ++j) q[j * b] = p[j * a];
  });
}

void fill_view(const View& dst, float value) {
  const int r = dst.rank();
  for_rows(dst.shape, dst.strides, dst.strides, [&](int64_t, int64_t od, int64_t n) {
    float* q = dst.data + od;
    const int64_t b = r ? dst.strides[r - 1] : 1;
    for (int64_t j = 0; j < n; ++j) q[j * b] = value;
  });
}

}  // namespace dlfuse_onednn
