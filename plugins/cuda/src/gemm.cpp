// gemm(): the plugin's own kernel for tiny problems, zero-padded copies for matrices whose
// rows do not start on 16 bytes, cuBLASLt (gemm_lt.cpp), and gathered copies of views no
// cuBLASLt layout expresses; and the Mat helpers gemm.h declares.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "gemm_lt.h"
#include "kernels.h"

namespace dlfuse_cuda {
namespace {

// ---- matrices whose rows do not start on 16 bytes ---------------------------------------
//
// cuBLASLt serves a matrix whose leading dimension, or contiguous dim, is not a multiple of
// 16 bytes with its alignment-1 kernels, its slowest: a 13-wide layer (26-byte rows) took a
// 32768-row bfloat16 layer to sm75-era align1 kernels on the H200, whose RELU epilogue also
// failed the NaN probe. A plain 2-D problem whose misaligned matrices are small next to its
// work runs instead on zero-padded copies with 16-byte rows: the contiguous dim of each
// misaligned matrix is rounded up to 16 bytes (K: the added products are 0 * 0; M or N: D's
// extra rows or columns are dropped, the bias is padded with zeros), and D goes through such
// a copy where needed, holding D's values where D is also the addend (beta != 0: a bias
// broadcast into it, a residual).
constexpr int64_t kRowBytes = 16;
constexpr int64_t kPadWorkRatio = 64;  // multiply-adds per element copied, at least

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A matrix (not a vector) cuBLASLt can read whose base, leading dimension or contiguous dim
// is not a multiple of 16 bytes.
bool misaligned(const Mat& m, int es) {
  const Lay l = classify(m.R, m.C, m.sr, m.sc);
  if (m.R <= 1 || m.C <= 1 || !l.ok) return false;
  const int64_t inner = l.row ? m.C : m.R;
  return (l.ld * es) % kRowBytes != 0 || (inner * es) % kRowBytes != 0 ||
         reinterpret_cast<uintptr_t>(m.base) % kRowBytes != 0;
}

bool row_major(const Mat& m) { return classify(m.R, m.C, m.sr, m.sc).row; }

// An R x C matrix in m's orientation with 16-byte rows in t: m in its top-left corner and
// zeros elsewhere (when `fill`; else uninitialized).
Mat padded(const Mat& m, int64_t R, int64_t C, DType dt, bool fill, Temp& t, DeviceState& ds, cudaStream_t s) {
  const int64_t es = dsize(dt);
  const bool row = row_major(m);
  const int64_t ld = round_up(row ? C : R, kRowBytes / es), outer = row ? R : C;
  t.reset(ds, size_t(outer * ld * es));
  Mat p = m;
  p.base = static_cast<char*>(t.get());
  p.R = R;
  p.C = C;
  p.sr = row ? ld : 1;
  p.sc = row ? 1 : ld;
  std::fill(p.bs.begin(), p.bs.end(), 0);
  if (fill)
    pad_rows(dt, m.base, row ? m.sr : m.sc, row ? m.sc : m.sr, row ? m.R : m.C, row ? m.C : m.R, p.base, outer, ld, s);
  return p;
}

// D's elements, copied from the padded P's top-left corner (by rows where D is compact).
void copy_back(const Mat& P, const Mat& D, DType dt, cudaStream_t s) {
  if (row_major(D) && D.sc == 1 && D.sr == D.C) return copy_rows(dt, P.base, P.sr, D.base, D.R, D.C, s);
  if (!row_major(D) && D.sr == 1 && D.sc == D.R) return copy_rows(dt, P.base, P.sc, D.base, D.C, D.R, s);
  const int64_t shape[2] = {D.R, D.C};
  View src = compact_view(shape, 2), dst = src;
  src.stride[0] = P.sr;
  src.stride[1] = P.sc;
  dst.stride[0] = D.sr;
  dst.stride[1] = D.sc;
  copy_view(dt, P.base, src, D.base, dst, 0, s);
}

// Runs g on padded copies where that pays (above). kNoAlgo where it does not apply (nothing
// enqueued) or where cuBLASLt has no algorithm for the padded problem (its copies enqueued,
// unused): the caller then runs g as it is.
GemmStatus run_padded(const Gemm& g, DeviceState& ds, cudaStream_t s) {
  if (g.C || g.aux) return GemmStatus::kNoAlgo;
  for (int64_t d : g.batch_shape)
    if (d != 1) return GemmStatus::kNoAlgo;
  const DType dd = g.out_f32 ? DType::kF32 : g.out;
  const int es = dsize(g.in), des = dsize(dd);
  const bool mx = misaligned(g.X, es), my = misaligned(g.Y, es), md = misaligned(g.D, des);
  if (!mx && !my && !md) return GemmStatus::kNoAlgo;
  const bool xr = row_major(g.X), yr = row_major(g.Y), dr = row_major(g.D);
  const int64_t M = g.D.R, N = g.D.C, K = g.X.C, v = kRowBytes / std::min(es, des);
  const int64_t Kp = (mx && xr) || (my && !yr) ? round_up(K, kRowBytes / es) : K;
  const int64_t Mp = (mx && !xr) || (md && !dr) ? round_up(M, v) : M;
  const int64_t Np = (my && yr) || (md && dr) ? round_up(N, v) : N;
  const bool cx = mx || Kp != K || Mp != M, cy = my || Kp != K || Np != N, cd = md || Mp != M || Np != N;
  const double copied = double(cx ? Mp * Kp : 0) + double(cy ? Kp * Np : 0) + double(cd ? Mp * Np : 0);
  if (copied * kPadWorkRatio > double(M) * double(N) * double(K)) return GemmStatus::kNoAlgo;
  Temp tx(ds, 0, s), ty(ds, 0, s), td(ds, 0, s), tb(ds, 0, s);
  Gemm p = g;
  if (cx) p.X = padded(g.X, Mp, Kp, g.in, true, tx, ds, s);
  if (cy) p.Y = padded(g.Y, Kp, Np, g.in, true, ty, ds, s);
  // With beta != 0 and no separate C, D is also the addend (a broadcast bias, a residual):
  // its copy starts from D's values.
  if (cd) p.D = padded(g.D, Mp, Np, dd, g.beta != 0.f, td, ds, s);
  // The bias runs along cuBLASLt's rows: N for a row-major D (computed as D^T), else M.
  const int64_t bias_len = dr ? N : M, bias_len_p = dr ? Np : Mp;
  if (g.bias && bias_len_p != bias_len) {
    tb.reset(ds, size_t(bias_len_p * des));
    DLF_CUDA(cudaMemsetAsync(tb.get(), 0, size_t(bias_len_p * des), s));
    DLF_CUDA(cudaMemcpyAsync(tb.get(), g.bias, size_t(bias_len * des), cudaMemcpyDeviceToDevice, s));
    p.bias = static_cast<const char*>(tb.get());
  }
  const GemmStatus st = run_gemm(p, ds, s);
  if (st == GemmStatus::kOk && cd) copy_back(p.D, g.D, dd, s);
  return st;
}

}  // namespace

Mat mat_of(const DLTensor* t, int nb) {
  Mat m;
  m.base = base_of(t);
  m.R = t->shape[t->ndim - 2];
  m.C = t->shape[t->ndim - 1];
  m.sr = elem_stride(t, t->ndim - 2);
  m.sc = elem_stride(t, t->ndim - 1);
  const std::vector<int64_t> full = aligned_strides(t, nb + 2);
  m.bs.assign(full.begin(), full.end() - 2);
  return m;
}

Mat transposed(Mat m) {
  std::swap(m.R, m.C);
  std::swap(m.sr, m.sc);
  return m;
}

Lay classify(int64_t R, int64_t C, int64_t sr, int64_t sc) {
  if (R == 1 && C == 1) return {true, true, 1};
  if (R == 1) {
    if (sc == 1) return {true, true, C};
    if (sc >= 1) return {true, false, sc};
    return {};
  }
  if (C == 1) {
    if (sr == 1) return {true, false, R};
    if (sr >= 1) return {true, true, sr};
    return {};
  }
  if (sc == 1 && sr >= C) return {true, true, sr};
  if (sr == 1 && sc >= R) return {true, false, sc};
  return {};
}

bool same_orientation(const Mat& m, const Mat& D) {
  const Lay lm = classify(m.R, m.C, m.sr, m.sc), ld = classify(D.R, D.C, D.sr, D.sc);
  return lm.ok && ld.ok && lm.row == ld.row;
}

// cuBLASLt states no alignment for the aux pointer and no preference selects by it, and its
// GELU_AUX kernels store aux 16 bytes at a time: a 16-bit pre at an 8-byte address faulted
// (cudaErrorMisalignedAddress, which ends the CUDA context). Such a pre takes the unfused path.
bool aux_compatible(const Mat& m, const Mat& D) {
  if (!same_orientation(m, D) || classify(m.R, m.C, m.sr, m.sc).ld % 8 != 0) return false;
  if (reinterpret_cast<uintptr_t>(m.base) % kRowBytes != 0) return false;
  for (int64_t b : m.bs)
    if (b % 8 != 0) return false;
  return true;
}

bool gemm(Gemm g, DeviceState& ds, cudaStream_t s) {
  if (small_gemm(g, s)) return true;
  GemmStatus st = run_padded(g, ds, s);
  if (st == GemmStatus::kOk) return true;
  if (st == GemmStatus::kEpilogueUnusable) return false;
  st = run_gemm(g, ds, s);
  if (st == GemmStatus::kOk) return true;
  if (st == GemmStatus::kEpilogueUnusable) return false;
  Temp tx(ds, 0, s), ty(ds, 0, s);
  g.X = gather(g.X, g.batch_shape, g.in, tx, ds, s);
  g.Y = gather(g.Y, g.batch_shape, g.in, ty, ds, s);
  st = run_gemm(g, ds, s);
  if (st == GemmStatus::kOk) return true;
  if (st == GemmStatus::kEpilogueUnusable) return false;
  throw Error(DLFUSE_STATUS_UNSUPPORTED, "cuBLASLt has no algorithm for this matmul (M=" + std::to_string(g.D.R) +
                                             ", N=" + std::to_string(g.D.C) + ", K=" + std::to_string(g.X.C) + ")");
}

}  // namespace dlfuse_cuda
