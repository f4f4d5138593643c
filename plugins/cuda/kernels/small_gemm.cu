// Tiny GEMMs in one own kernel instead of cuBLASLt. Why: a cublasLtMatmul call costs
// 7.5-13.5 us of host time even with a kept descriptor and algorithm (H100 host,
// docs/cuda.md), a small launch (a memset there) 0.9-1.5 us; for a 32x32x32 problem the
// GPU work is far below either. The kernel computes what the cuBLASLt path computes
// (gemm_lt.cpp: describe / epilogue_of), epilogue included: per batch index and element (i, j)
// pre = sum_k X[i,k] Y[k,j] (float, increasing k) + beta C[i,j] + bias, D = act(pre),
// aux = pre. One thread per element of D, any strides (0 included), deterministic.

#include "device_math.cuh"
#include "gemm.h"

namespace dlfuse_cuda {
namespace {

// "Small": at most 2^18 multiply-adds over the whole batch, at most 65535 batch instances
// (grid.y), and K at most 1024 (one thread runs the whole K loop: its serial FMA chain
// bounds the kernel's time; a larger K, e.g. a weight gradient over many rows, stays on
// cuBLASLt).
constexpr int64_t kMaxMacs = int64_t(1) << 18;
constexpr int64_t kMaxBatch = 65535;
constexpr int64_t kMaxK = 1024;
constexpr int kMaxBatchDims = 6;  // batch dims of size > 1
constexpr int kThreads = 256;

bool small_gemm_enabled() {
  static const bool on = env_enabled("DLFUSE_CUDA_SMALL_GEMM");
  return on;
}

// Everything the kernel reads, by value. Element strides; batch strides per batch dim.
struct SgArgs {
  const void* X = nullptr;
  const void* Y = nullptr;
  void* D = nullptr;
  const void* C = nullptr;  // the addend (D itself when the Gemm has none); read when has_c
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t R = 0, N = 0, K = 0;
  int64_t xsr = 0, xsc = 0, ysr = 0, ysc = 0, dsr = 0, dsc = 0, csr = 0, csc = 0, asr = 0, asc = 0;
  int nb = 0;
  int64_t shape[kMaxBatchDims] = {};
  int64_t xbs[kMaxBatchDims] = {}, ybs[kMaxBatchDims] = {}, dbs[kMaxBatchDims] = {}, cbs[kMaxBatchDims] = {},
          bbs[kMaxBatchDims] = {}, aubs[kMaxBatchDims] = {};
  float beta = 0.f;
  bool has_c = false;
  bool d_row = true;  // D row-major for cuBLASLt: threads run along j, the bias is indexed by j
  int act = DLFUSE_ACT_IDENTITY;
};

// TI: X and Y; TO: D, C, bias, aux. blockIdx.y is the batch index.
template <class TI, class TO>
__global__ void __launch_bounds__(kThreads) small_gemm_k(const SgArgs a) {
  const int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= a.R * a.N) return;
  int64_t i, j;
  if (a.d_row) {
    i = e / a.N;
    j = e - i * a.N;
  } else {
    j = e / a.R;
    i = e - j * a.R;
  }
  int64_t ox = 0, oy = 0, od = 0, oc = 0, ob = 0, oa = 0;
  int64_t b = blockIdx.y;
  for (int d = a.nb - 1; d >= 0; --d) {
    const int64_t q = b / a.shape[d], id = b - q * a.shape[d];
    b = q;
    ox += id * a.xbs[d];
    oy += id * a.ybs[d];
    od += id * a.dbs[d];
    oc += id * a.cbs[d];
    ob += id * a.bbs[d];
    oa += id * a.aubs[d];
  }
  const TI* x = static_cast<const TI*>(a.X) + ox + i * a.xsr;
  const TI* y = static_cast<const TI*>(a.Y) + oy + j * a.ysc;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t k = 0; k < a.K; ++k) acc = fmaf(ldf(x + k * a.xsc), ldf(y + k * a.ysr), acc);
  float pre = acc;
  TO* dp = static_cast<TO*>(a.D) + od + i * a.dsr + j * a.dsc;
  // C may be D itself: this thread reads its element before writing it, and no other does.
  if (a.has_c) pre = pre + a.beta * ldf(static_cast<const TO*>(a.C) + oc + i * a.csr + j * a.csc);
  if (a.bias) pre = pre + ldf(static_cast<const TO*>(a.bias) + ob + (a.d_row ? j : i));
  if (a.aux) stf(static_cast<TO*>(a.aux) + oa + i * a.asr + j * a.asc, pre);
  stf(dp, act_fwd<false>(a.act, pre));
}

template <class TI>
void launch_out(DType out, dim3 grid, const SgArgs& a, cudaStream_t s) {
  switch (out) {
    case DType::kF32: small_gemm_k<TI, float><<<grid, kThreads, 0, s>>>(a); break;
    case DType::kF16: small_gemm_k<TI, __half><<<grid, kThreads, 0, s>>>(a); break;
    case DType::kBF16: small_gemm_k<TI, __nv_bfloat16><<<grid, kThreads, 0, s>>>(a); break;
  }
}

}  // namespace

bool small_gemm(const Gemm& g, cudaStream_t s) {
  if (!small_gemm_enabled()) return false;
  const int64_t R = g.D.R, N = g.D.C, K = g.X.C;
  if (K < 1 || K > kMaxK) return false;
  const size_t nbf = g.batch_shape.size();
  if (g.X.bs.size() != nbf || g.Y.bs.size() != nbf || g.D.bs.size() != nbf || (g.bias && g.bias_bs.size() != nbf) ||
      (g.C && g.C->bs.size() != nbf) || (g.aux && g.aux->bs.size() != nbf))
    return false;
  bool empty = R <= 0 || N <= 0;
  for (int64_t n : g.batch_shape) empty = empty || n <= 0;
  if (empty) return true;  // nothing to compute
  int64_t count = 1;
  for (int64_t n : g.batch_shape) {
    if (n > kMaxBatch / count) return false;
    count *= n;
  }
  int64_t macs = 1;
  for (int64_t f : {R, N, K, count}) {
    if (f > kMaxMacs / macs) return false;
    macs *= f;
  }

  SgArgs a;
  const bool has_c = g.beta != 0.f;
  const Mat& cm = g.C ? *g.C : g.D;
  // As epilogue_of(): the pre-activation is written only by the GELU_AUX epilogues.
  const Mat* aux = g.act == EpiAct::kGelu ? g.aux : nullptr;
  for (size_t d = 0; d < nbf; ++d) {
    if (g.batch_shape[d] == 1) continue;
    if (a.nb == kMaxBatchDims) return false;
    const int k = a.nb++;
    a.shape[k] = g.batch_shape[d];
    a.xbs[k] = g.X.bs[d];
    a.ybs[k] = g.Y.bs[d];
    a.dbs[k] = g.D.bs[d];
    a.cbs[k] = has_c ? cm.bs[d] : 0;
    a.bbs[k] = g.bias ? g.bias_bs[d] : 0;
    a.aubs[k] = aux ? aux->bs[d] : 0;
  }
  a.X = g.X.base;
  a.Y = g.Y.base;
  a.D = g.D.base;
  a.C = has_c ? cm.base : nullptr;
  a.bias = g.bias;
  a.aux = aux ? aux->base : nullptr;
  a.R = R;
  a.N = N;
  a.K = K;
  a.xsr = g.X.sr;
  a.xsc = g.X.sc;
  a.ysr = g.Y.sr;
  a.ysc = g.Y.sc;
  a.dsr = g.D.sr;
  a.dsc = g.D.sc;
  a.csr = has_c ? cm.sr : 0;
  a.csc = has_c ? cm.sc : 0;
  a.asr = aux ? aux->sr : 0;
  a.asc = aux ? aux->sc : 0;
  a.beta = g.beta;
  a.has_c = has_c;
  // The bias runs along D's contiguous dim as cuBLASLt sees it (describe(): m = D.C for a
  // row-major D, D.R otherwise); classify's answer for an inexpressible D is row-major.
  a.d_row = classify(R, N, g.D.sr, g.D.sc).row;
  a.act = g.act == EpiAct::kRelu   ? DLFUSE_ACT_RELU
          : g.act == EpiAct::kGelu ? DLFUSE_ACT_GELU_TANH
                                   : DLFUSE_ACT_IDENTITY;

  const DType out = g.out_f32 ? DType::kF32 : g.out;
  const dim3 grid(unsigned((R * N + kThreads - 1) / kThreads), unsigned(count));
  switch (g.in) {
    case DType::kF32: launch_out<float>(out, grid, a, s); break;
    case DType::kF16: launch_out<__half>(out, grid, a, s); break;
    case DType::kBF16: launch_out<__nv_bfloat16>(out, grid, a, s); break;
  }
  DLF_LAUNCHED("small gemm kernel");
  return true;
}

}  // namespace dlfuse_cuda
