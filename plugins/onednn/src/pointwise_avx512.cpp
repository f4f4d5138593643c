// AVX-512 bodies of add_mul_activation (pointwise_avx512.h). The whole file is built for
// AVX-512 (F, BW, VL, DQ, BF16) by the pragma below and only entered after usable() has
// checked the CPU; the rest of the plugin stays baseline x86-64. Built with
// -ffp-contract=off: x + b + m * y rounds as written, like the reference and the other paths.
//
// Per 16 elements: load each input in its dtype and widen to float32 (bfloat16: a shift of
// the 16 bits; float16: vcvtph2ps), compute, narrow and store (bfloat16: vcvtneps2bf16 where
// the CPU has avx512_bf16, else round-to-nearest-even in integer shifts; float16:
// vcvtps2ph). Large outputs go out with streaming stores (no read-for-ownership of lines
// about to be overwritten whole). Threads take whole rows (or, for few long rows, column
// ranges), so every thread streams its own contiguous ranges; a row bias's gradient is
// summed per thread in float64 and the partial sums are merged once at the end.
#include "pointwise_avx512.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <dlfuse/types.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

namespace dlfuse_onednn {
namespace avx512 {
namespace {

constexpr int64_t kStreamBytes = int64_t(16) << 20;  // outputs above this use streaming stores
constexpr int64_t kRowGroup = 2;                     // rows per step of the backward

inline bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }
inline __mmask16 mask_of(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1u);
}

inline void store_half(void* p, int64_t i, __m256i h, __mmask16 k, bool nt) {
  uint16_t* q = static_cast<uint16_t*>(p) + i;
  if (nt && k == 0xffff && aligned(q, 32))
    _mm256_stream_si256(reinterpret_cast<__m256i*>(q), h);
  else
    _mm256_mask_storeu_epi16(q, k, h);
}
inline __m256i load_half(const void* p, int64_t i, __mmask16 k) {
  return _mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(p) + i);
}

// Element policies: load 16 elements (masked lanes read as 0) as float32; store 16.
struct F32 {
  static constexpr int kBytes = 4;
  static __m512 load(const void* p, int64_t i, __mmask16 k) {
    return _mm512_maskz_loadu_ps(k, static_cast<const float*>(p) + i);
  }
  static __m512 load_bwd(const void* p, int64_t i, __mmask16 k) { return load(p, i, k); }
  static void store(void* p, int64_t i, __m512 v, __mmask16 k, bool nt) {
    float* q = static_cast<float*>(p) + i;
    if (nt && k == 0xffff && aligned(q, 64))
      _mm512_stream_ps(q, v);
    else
      _mm512_mask_storeu_ps(q, k, v);
  }
};
struct BF16Shift {
  static constexpr int kBytes = 2;
  static __m512 load(const void* p, int64_t i, __mmask16 k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load_half(p, i, k)), 16));
  }
  // The same with one word permute (element i to the high half of dword i, low halves
  // zeroed) instead of a zero-extension and a shift. Measured at 16384x8192 (CPU time,
  // builds alternated): the backward from x, y, bias, bound by instructions, 46.8 against
  // 53.9 ms; the forward, bound by bytes, about 6% slower with it, so it keeps load().
  static __m512 load_bwd(const void* p, int64_t i, __mmask16 k) {
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0,
                                         3, 0, 2, 0, 1, 0, 0, 0);
    return _mm512_castsi512_ps(
        _mm512_maskz_permutexvar_epi16(__mmask32(0xaaaaaaaau), idx, _mm512_castsi256_si512(load_half(p, i, k))));
  }
  // Round to nearest even; a NaN keeps its top bits and is made quiet (never rounds to Inf).
  static void store(void* p, int64_t i, __m512 v, __mmask16 k, bool nt) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    store_half(p, i, _mm512_cvtepi32_epi16(r), k, nt);
  }
};
struct BF16Native {
  static constexpr int kBytes = 2;
  static __m512 load(const void* p, int64_t i, __mmask16 k) { return BF16Shift::load(p, i, k); }
  static __m512 load_bwd(const void* p, int64_t i, __mmask16 k) { return BF16Shift::load_bwd(p, i, k); }
  // vcvtneps2bf16: round to nearest even, NaN made quiet; it flushes float32 denormals
  // (below 1.2e-38) to zero, which the shift path keeps.
  static void store(void* p, int64_t i, __m512 v, __mmask16 k, bool nt) {
    store_half(p, i, (__m256i)_mm512_cvtneps_pbh(v), k, nt);
  }
};
struct F16 {
  static constexpr int kBytes = 2;
  static __m512 load(const void* p, int64_t i, __mmask16 k) { return _mm512_maskz_cvtph_ps(k, load_half(p, i, k)); }
  static __m512 load_bwd(const void* p, int64_t i, __mmask16 k) { return load(p, i, k); }
  static void store(void* p, int64_t i, __m512 v, __mmask16 k, bool nt) {
    store_half(p, i, _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), k, nt);
  }
};

// where(v > 0 or isnan(v), keep, 0): v <= 0 is false for NaN.
inline __m512 relu_select(__m512 v, __m512 keep) {
  return _mm512_maskz_mov_ps(__mmask16(~_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ)), keep);
}

// Calls seg(e, len, col, tid, count) over the [rows, n] tensor: threads take rows (up to
// `group` consecutive rows per call, count of them, from element e), or column ranges
// (multiples of 64 elements) of every row, one row per call, when rows are few or long.
template <class Seg>
__attribute__((always_inline)) inline void split(int64_t rows, int64_t n, int nthr, bool by_rows, int64_t group,
                                                 Seg&& seg) {
#pragma omp parallel num_threads(nthr)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (by_rows) {
      const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
      for (int64_t r = r0; r < r1; r += group) seg(r * n, n, int64_t(0), t, std::min(group, r1 - r));
    } else {
      const int64_t blocks = (n + 63) / 64;
      const int64_t c0 = std::min(n, blocks * t / nt * 64), c1 = std::min(n, blocks * (t + 1) / nt * 64);
      if (c1 > c0)
        for (int64_t r = 0; r < rows; ++r) seg(r * n + c0, c1 - c0, c0, t, int64_t(1));
    }
  }
}

// Runs body(j, k) over [0, len) in vectors of 16 (mask k), the first one cut so that the
// stores of `anchor + e` (the first output) are vector-aligned.
template <class T, class Body>
__attribute__((always_inline)) inline void vectors(const void* anchor, int64_t e, int64_t len, Body&& body) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(anchor) + uintptr_t(e) * T::kBytes, vb = 16 * T::kBytes;
  int64_t j = 0;
  if (a % T::kBytes == 0 && a % vb != 0) {
    const int64_t first = std::min<int64_t>(len, int64_t((vb - a % vb) / T::kBytes));
    body(int64_t(0), mask_of(first));
    j = first;
  }
  for (; j + 16 <= len; j += 16) body(j, __mmask16(0xffff));
  if (j < len) body(j, mask_of(len - j));
}

// Runs body(j, count) over [0, len) a cache line of `anchor + e` at a time (count <= 64
// bytes' worth of elements: 16 float32, 32 bf16/f16; the first line cut at alignment).
// The backward's row groups then write whole lines of every output in one step, so each
// line's streaming stores reach the write-combining buffer back to back.
template <class T, class Body>
__attribute__((always_inline)) inline void lines(const void* anchor, int64_t e, int64_t len, Body&& body) {
  constexpr int64_t kLine = 64 / T::kBytes;
  const uintptr_t a = reinterpret_cast<uintptr_t>(anchor) + uintptr_t(e) * T::kBytes;
  int64_t j = 0;
  if (a % T::kBytes == 0 && a % 64 != 0) {
    const int64_t first = std::min<int64_t>(len, int64_t((64 - a % 64) / T::kBytes));
    body(int64_t(0), first);
    j = first;
  }
  for (; j + kLine <= len; j += kLine) body(j, kLine);
  if (j < len) body(j, len - j);
}

// The work layout of a call: threads, split and streaming.
struct Plan {
  int64_t rows, n;
  int nthr;
  bool by_rows, nt;
};
Plan plan(int64_t rows, int64_t n, int bytes) {
  const int64_t total = rows * n;
  Plan p{rows, n, total > (1 << 15) ? omp_get_max_threads() : 1, true, total * bytes > kStreamBytes};
  p.by_rows = rows >= 4 * p.nthr && n <= (int64_t(1) << 16);
  return p;
}

// ---- forward -------------------------------------------------------------------------------
template <class T, bool Relu, Span BS>
void forward_t(const AddMul& a) {
  const Plan p = plan(a.rows, a.n, T::kBytes);
  const __m512 m = _mm512_set1_ps(a.mult);
  const __m512 b0 = BS == Span::kScalar ? T::load(a.bias, 0, 1) : _mm512_setzero_ps();
  const __m512 bs = _mm512_permutexvar_ps(_mm512_setzero_si512(), b0);  // lane 0 everywhere
  const void *xp = a.x, *yp = a.y, *bp = a.bias;
  void* op = a.out;
  const bool nt = p.nt;
  split(p.rows, p.n, p.nthr, p.by_rows, 1, [=](int64_t e, int64_t len, int64_t col, int, int64_t) {
    vectors<T>(
        op, e, len, [=](int64_t j, __mmask16 k) __attribute__((always_inline)) {
          const __m512 x = T::load(xp, e + j, k), y = T::load(yp, e + j, k);
          const __m512 b = BS == Span::kScalar ? bs : T::load(bp, BS == Span::kRow ? col + j : e + j, k);
          __m512 pre = _mm512_add_ps(_mm512_add_ps(x, b), _mm512_mul_ps(m, y));
          if (Relu) pre = relu_select(pre, pre);
          T::store(op, e + j, pre, k, nt);
        });
  });
}

// ---- backward ------------------------------------------------------------------------------
// d = g * act'(pre) (from pre: IDENTITY, RELU) or g * act'(out) (IDENTITY, RELU, SIGMOID, TANH).
template <class T, int Act, bool FromOut, Span GS>
void backward_t(const AddMul& a) {
  const Plan p = plan(a.rows, a.n, T::kBytes);
  const __m512 m_ = _mm512_set1_ps(a.mult), one_ = _mm512_set1_ps(1.f);
  const __m512 b0 = !FromOut && a.bias_span == Span::kScalar ? T::load(a.bias, 0, 1) : _mm512_setzero_ps();
  const __m512 bs_ = _mm512_permutexvar_ps(_mm512_setzero_si512(), b0);
  const Span bspan = a.bias_span;
  const bool want_row = a.gb && GS == Span::kRow, want_scalar = a.gb && GS == Span::kScalar;
  // Row sums: one array per thread when threads take rows; one shared array when they
  // take disjoint columns.
  const size_t row_arrays = p.by_rows ? size_t(p.nthr) : 1;
  std::vector<double> row_acc(want_row ? row_arrays * size_t(p.n) : 0, 0.0);
  std::vector<double> scalar_acc(want_scalar ? size_t(p.nthr) * 8 : 0, 0.0);
  void* anchor = a.gx ? a.gx : a.gy ? a.gy : a.gb;
  const void *gp_ = a.g, *op_ = a.out_in, *xp_ = a.x, *yp_ = a.y, *bp_ = a.bias;
  void *gxp_ = a.gx, *gyp_ = a.gy, *gbp_ = a.gb;
  const bool nt = p.nt, by_rows = p.by_rows;
  const int64_t n = p.n;
  double* const row_base = row_acc.data();
  double* const scalar_base = scalar_acc.data();
  // Threads take 2 rows at a time, a cache line of each array per step, and sum the two
  // rows' d in float32 registers before adding to the float64 sums: half the traffic to
  // the sums (64 KiB per thread at N = 8192, more than L1). Measured at 16384x8192 (CPU
  // time, interleaved): 2 rows beat 1 (bf16 backward from out with grad_bias 35 against
  // 48 ms, float32 backward 78 against 91 ms) and 4 (20 streams: float32 backward 127 ms).
  const int64_t group = kRowGroup;
  split(p.rows, p.n, p.nthr, p.by_rows, group, [=](int64_t e0, int64_t len, int64_t col, int t, int64_t count) {
    double* racc = want_row ? row_base + (by_rows ? size_t(t) * size_t(n) : 0) : nullptr;
    __m512d s_lo = _mm512_setzero_pd(), s_hi = _mm512_setzero_pd();
    // Locals, not the closure's members: the inner loop then keeps them in registers
    // instead of reloading them after every store.
    const void *gp = gp_, *op = op_, *xp = xp_, *yp = yp_, *bp = bp_;
    void *gxp = gxp_, *gyp = gyp_, *gbp = gbp_;
    const __m512 m = m_, one = one_, bs = bs_;
    lines<T>(
        anchor, e0, len, [&](int64_t j0, int64_t cnt) __attribute__((always_inline)) {
          constexpr int kHalves = 4 / T::kBytes;  // 16-element vectors per line
          __m512 dsum[kHalves];
          for (int h = 0; h < kHalves; ++h) dsum[h] = _mm512_setzero_ps();
          for (int64_t rr = 0; rr < count; ++rr) {
            const int64_t e = e0 + rr * n;
            for (int h = 0; h < kHalves; ++h) {
              const int64_t j = j0 + 16 * h;
              const __mmask16 k = mask_of(cnt - 16 * h);
              const __m512 g = T::load_bwd(gp, e + j, k);
              __m512 d = g;
              if (FromOut && Act != DLFUSE_ACT_IDENTITY) {
                const __m512 o = T::load_bwd(op, e + j, k);
                if (Act == DLFUSE_ACT_RELU)
                  d = relu_select(o, g);
                else if (Act == DLFUSE_ACT_SIGMOID)
                  d = _mm512_mul_ps(g, _mm512_mul_ps(o, _mm512_sub_ps(one, o)));
                else
                  d = _mm512_mul_ps(g, _mm512_sub_ps(one, _mm512_mul_ps(o, o)));  // TANH
              } else if (!FromOut && Act == DLFUSE_ACT_RELU) {
                const __m512 x = T::load_bwd(xp, e + j, k), y = T::load_bwd(yp, e + j, k);
                const __m512 b =
                    bspan == Span::kScalar ? bs : T::load_bwd(bp, bspan == Span::kRow ? col + j : e + j, k);
                d = relu_select(_mm512_add_ps(_mm512_add_ps(x, b), _mm512_mul_ps(m, y)), g);
              }
              if (gxp) T::store(gxp, e + j, d, k, nt);
              if (gyp) T::store(gyp, e + j, _mm512_mul_ps(m, d), k, nt);
              if (GS == Span::kFull && gbp) T::store(gbp, e + j, d, k, nt);
              dsum[h] = _mm512_add_ps(dsum[h], d);
            }
          }
          for (int h = 0; h < kHalves; ++h) {
            const __mmask16 k = mask_of(cnt - 16 * h);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(dsum[h]));
            const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(dsum[h]), 1)));
            if (GS == Span::kRow && racc) {
              double* q = racc + col + j0 + 16 * h;
              const __mmask8 klo = __mmask8(k & 0xff), khi = __mmask8(k >> 8);
              _mm512_mask_storeu_pd(q, klo, _mm512_add_pd(_mm512_maskz_loadu_pd(klo, q), lo));
              _mm512_mask_storeu_pd(q + 8, khi, _mm512_add_pd(_mm512_maskz_loadu_pd(khi, q + 8), hi));
            } else if (GS == Span::kScalar && want_scalar) {  // masked lanes hold 0
              s_lo = _mm512_add_pd(s_lo, lo);
              s_hi = _mm512_add_pd(s_hi, hi);
            }
          }
        });
    if (want_scalar) {
      double* q = scalar_base + size_t(t) * 8;
      _mm512_storeu_pd(q, _mm512_add_pd(_mm512_loadu_pd(q), _mm512_add_pd(s_lo, s_hi)));
    }
  });
  if (p.nt) _mm_sfence();
  if (want_row) {  // merge the partial sums once, store them in the dtype
    float tmp[16];
    for (int64_t c = 0; c < p.n; c += 16) {
      const int64_t cnt = std::min<int64_t>(16, p.n - c);
      for (int64_t j = 0; j < cnt; ++j) {
        double s = 0.0;
        for (size_t t = 0; t < row_arrays; ++t) s += row_acc[t * size_t(p.n) + size_t(c + j)];
        tmp[j] = float(s);
      }
      T::store(a.gb, c, _mm512_maskz_loadu_ps(mask_of(cnt), tmp), mask_of(cnt), false);
    }
  } else if (want_scalar) {
    double s = 0.0;
    for (double v : scalar_acc) s += v;
    T::store(a.gb, 0, _mm512_set1_ps(float(s)), 1, false);
  }
}

// ---- dispatch over the template parameters -------------------------------------------------
template <class T>
void forward_elem(const AddMul& a) {
  const bool relu = a.act == DLFUSE_ACT_RELU;
  switch (a.bias_span) {
    case Span::kRow: return relu ? forward_t<T, true, Span::kRow>(a) : forward_t<T, false, Span::kRow>(a);
    case Span::kScalar: return relu ? forward_t<T, true, Span::kScalar>(a) : forward_t<T, false, Span::kScalar>(a);
    case Span::kFull: return relu ? forward_t<T, true, Span::kFull>(a) : forward_t<T, false, Span::kFull>(a);
  }
}

template <class T, int Act, bool FromOut>
void backward_span(const AddMul& a) {
  switch (a.gb_span) {
    case Span::kRow: return backward_t<T, Act, FromOut, Span::kRow>(a);
    case Span::kScalar: return backward_t<T, Act, FromOut, Span::kScalar>(a);
    case Span::kFull: return backward_t<T, Act, FromOut, Span::kFull>(a);
  }
}

template <class T>
void backward_elem(const AddMul& a, bool from_out) {
  switch (a.act) {
    case DLFUSE_ACT_RELU:
      return from_out ? backward_span<T, DLFUSE_ACT_RELU, true>(a) : backward_span<T, DLFUSE_ACT_RELU, false>(a);
    case DLFUSE_ACT_SIGMOID: return backward_span<T, DLFUSE_ACT_SIGMOID, true>(a);
    case DLFUSE_ACT_TANH: return backward_span<T, DLFUSE_ACT_TANH, true>(a);
    default:
      return from_out ? backward_span<T, DLFUSE_ACT_IDENTITY, true>(a)
                      : backward_span<T, DLFUSE_ACT_IDENTITY, false>(a);
  }
}

}  // namespace

void forward(const AddMul& a) {
  switch (a.elem) {
    case Elem::kF32: return forward_elem<F32>(a);
    case Elem::kF16: return forward_elem<F16>(a);
    case Elem::kBF16: return native_bf16() ? forward_elem<BF16Native>(a) : forward_elem<BF16Shift>(a);
  }
}

void backward(const AddMul& a, bool from_out) {
  switch (a.elem) {
    case Elem::kF32: return backward_elem<F32>(a, from_out);
    case Elem::kF16: return backward_elem<F16>(a, from_out);
    case Elem::kBF16:
      return native_bf16() ? backward_elem<BF16Native>(a, from_out) : backward_elem<BF16Shift>(a, from_out);
  }
}

}  // namespace avx512
}  // namespace dlfuse_onednn

#pragma GCC pop_options

namespace dlfuse_onednn {
namespace avx512 {
namespace {

// 0: no AVX-512 path, 1: AVX-512 with shift conversions, 2: with avx512_bf16.
int level() {
  static const int lv = [] {
    __builtin_cpu_init();
    int l = 0;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
      l = __builtin_cpu_supports("avx512bf16") ? 2 : 1;
    const char* cap = std::getenv("DLFUSE_ONEDNN_MAX_ISA");
    if (cap && (!std::strcmp(cap, "avx2") || !std::strcmp(cap, "none"))) l = 0;
    if (cap && !std::strcmp(cap, "avx512_core")) l = std::min(l, 1);
    return l;
  }();
  return lv;
}

}  // namespace

bool usable() { return level() >= 1; }
bool native_bf16() { return level() >= 2; }

}  // namespace avx512
}  // namespace dlfuse_onednn
