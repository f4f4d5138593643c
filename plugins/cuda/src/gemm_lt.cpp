// The cuBLASLt path of the GEMM (gemm.h): batch layouts as cuBLASLt's, the plan cache, the
// algorithm choice (autotuning, the NaN probe) and the enqueue.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "gemm_lt.h"
#include "kernels.h"

namespace dlfuse_cuda {

// cuBLASLt's RELU epilogue is not NaN-faithful on every kernel: measured on the H100 with
// CUDA 13.0, some kernels keep relu(NaN) = NaN and some return 0 (float32 4096x1024x1024
// did; bench/peers/cublaslt.cpp probes it on every run). So the algorithm chosen for an
// activation epilogue (RELU, GELU) is checked once per problem: it runs on a zero-filled
// copy of the problem with one NaN in A, and must give NaN in D. If no candidate does, the
// activation runs in our own NaN-keeping pass after a BIAS epilogue for that problem.
namespace {

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(DLFUSE_STATUS_DEVICE_ERROR, std::string(what) + " failed: cublasStatus " + std::to_string(int(s)));
}
#define DLF_LT(call) lt_check((call), #call)

// The largest power of two (<= 256) dividing v.
uint64_t low_bit(uint64_t v) {
  v |= 256u;
  return v & (~v + 1);
}

// Largest power of two (<= 256) dividing every address a matrix's columns (as cuBLASLt sees
// it: ld apart, where it has more than one) start at, in every batch instance. The heuristic
// is given this rather than the base pointer's alignment: given D's base alone, a float16 D
// with 259-element rows beside a compact residual C got
// cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_nn_align2, which stores 4 bytes at a
// time (cudaErrorMisalignedAddress, which ends the CUDA context).
uint64_t alignment(const char* base, const std::vector<int64_t>& bs, int64_t ld, int esize) {
  uint64_t bits = reinterpret_cast<uintptr_t>(base) | uint64_t(ld) * uint64_t(esize);
  for (int64_t s : bs) bits |= uint64_t(s) * uint64_t(esize);
  return low_bit(bits);
}

// The instance of a batched operand at the alignment above: the base, or the base one step
// along the batch dim whose stride has the fewest trailing zero bits.
const char* least_aligned(const char* base, const std::vector<int64_t>& bs, int esize) {
  const char* worst = base;
  for (int64_t s : bs) {
    const char* p = base + s * esize;
    if (low_bit(reinterpret_cast<uintptr_t>(p)) < low_bit(reinterpret_cast<uintptr_t>(worst))) worst = p;
  }
  return worst;
}

struct Batch {
  std::vector<int64_t> shape;  // the output's batch dims
  int split = 0;               // dims [split, nb) go into one strided-batched call
  int64_t inner = 1;           // their element count
};

// Dims [d, nb) collapse for one operand when consecutive non-1 dims nest.
bool collapses(const std::vector<int64_t>& shape, const std::vector<int64_t>& s, int from) {
  int prev = -1;
  for (int d = from; d < int(shape.size()); ++d) {
    if (shape[size_t(d)] == 1) continue;
    if (prev >= 0 && s[size_t(prev)] != s[size_t(d)] * shape[size_t(d)]) return false;
    prev = d;
  }
  return true;
}

int64_t inner_stride(const Batch& b, const std::vector<int64_t>& s) {
  for (int d = int(b.shape.size()) - 1; d >= b.split; --d)
    if (b.shape[size_t(d)] != 1) return s[size_t(d)];
  return 0;
}

Batch plan_batch(const std::vector<int64_t>& shape, const std::vector<const std::vector<int64_t>*>& strides) {
  Batch b;
  b.shape = shape;
  const int nb = int(shape.size());
  b.split = nb;
  for (int d = nb - 1; d >= 0; --d) {
    bool ok = true;
    for (const auto* s : strides) ok = ok && collapses(shape, *s, d);
    if (!ok) break;
    b.split = d;
  }
  for (int d = b.split; d < nb; ++d) b.inner *= shape[size_t(d)];
  return b;
}

struct LtOperand {
  cublasOperation_t op;
  int64_t rows, cols, ld;
};

// cuBLASLt operand for Z (want_t false) or Z^T (true), Z laid out as `lay`.
LtOperand lt_operand(const Mat& z, const Lay& lay, bool want_t) {
  if (!want_t) return lay.row ? LtOperand{CUBLAS_OP_T, z.C, z.R, lay.ld} : LtOperand{CUBLAS_OP_N, z.R, z.C, lay.ld};
  return lay.row ? LtOperand{CUBLAS_OP_N, z.C, z.R, lay.ld} : LtOperand{CUBLAS_OP_T, z.R, z.C, lay.ld};
}

// Large GEMMs pick the fastest of cuBLASLt's first candidates once per problem key (timed
// with events on the call's stream: the host waits for that stream once, never for the
// device). Not while the stream is being captured into a graph, not when D is also an input
// (beta != 0). DLFUSE_CUDA_AUTOTUNE=0 keeps the heuristic's first answer.
constexpr int kAutotuneCandidates = 8;
constexpr double kAutotuneMinFlops = 8.0e9;

bool autotune_enabled() {
  static const bool on = env_enabled("DLFUSE_CUDA_AUTOTUNE");
  return on;
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unsure: do not time
  }
  return st != cudaStreamCaptureStatusNone;
}

template <class T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Elements a cuBLASLt layout touches (rows x cols, ld, `count` instances `stride` apart).
int64_t extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t count) {
  return (cols - 1) * ld + rows + (count > 1 ? stride * (count - 1) : 0);
}

// A Gemm as cuBLASLt sees it. D row-major: cuBLASLt computes D^T (C x R) = Y^T X^T;
// column-major: D = X Y. `key` holds everything the plan and the algorithm depend on.
struct LtProblem {
  LtOperand A{}, B{};
  const Mat* MA = nullptr;
  const Mat* MB = nullptr;
  int64_t m = 0, n = 0, k = 0, ldd = 0, ldc = 0, ldaux = 0;
  Batch bp;
  int64_t sa = 0, sb = 0, sd = 0, sc = 0, sbias = 0, saux = 0;
  uint64_t al_a = 0, al_b = 0, al_d = 0, al_c = 0;
  int in_es = 0, out_es = 0;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t in_t = CUDA_R_32F, out_t = CUDA_R_32F;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  std::string key;
};

cublasLtEpilogue_t epilogue_of(const Gemm& g) {
  switch (g.act) {
    case EpiAct::kRelu: return g.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case EpiAct::kGelu:
      if (g.aux) return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case EpiAct::kNone: break;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// False when a layout is not expressible or the batch too large for one call.
bool describe(const Gemm& g, LtProblem& p) {
  const Lay lx = classify(g.X.R, g.X.C, g.X.sr, g.X.sc);
  const Lay ly = classify(g.Y.R, g.Y.C, g.Y.sr, g.Y.sc);
  const Lay ld = classify(g.D.R, g.D.C, g.D.sr, g.D.sc);
  if (!lx.ok || !ly.ok || !ld.ok) return false;
  const Lay lc = g.C ? classify(g.C->R, g.C->C, g.C->sr, g.C->sc) : ld;
  const Lay laux = g.aux ? classify(g.aux->R, g.aux->C, g.aux->sr, g.aux->sc) : ld;
  if (!lc.ok || lc.row != ld.row || !laux.ok || laux.row != ld.row) return false;
  p.A = ld.row ? lt_operand(g.Y, ly, true) : lt_operand(g.X, lx, false);
  p.B = ld.row ? lt_operand(g.X, lx, true) : lt_operand(g.Y, ly, false);
  p.MA = ld.row ? &g.Y : &g.X;
  p.MB = ld.row ? &g.X : &g.Y;
  p.m = ld.row ? g.D.C : g.D.R;
  p.n = ld.row ? g.D.R : g.D.C;
  p.k = g.X.C;
  p.ldd = ld.ld;
  p.ldc = lc.ld;
  p.ldaux = laux.ld;
  p.in_es = dsize(g.in);
  p.out_es = g.out_f32 ? 4 : dsize(g.out);

  std::vector<const std::vector<int64_t>*> strides = {&p.MA->bs, &p.MB->bs, &g.D.bs};
  if (g.bias) strides.push_back(&g.bias_bs);
  if (g.C) strides.push_back(&g.C->bs);
  if (g.aux) strides.push_back(&g.aux->bs);
  p.bp = plan_batch(g.batch_shape, strides);
  if (p.bp.inner > INT32_MAX) return false;
  p.sa = inner_stride(p.bp, p.MA->bs);
  p.sb = inner_stride(p.bp, p.MB->bs);
  p.sd = inner_stride(p.bp, g.D.bs);
  p.sbias = g.bias ? inner_stride(p.bp, g.bias_bs) : 0;
  p.sc = g.C ? inner_stride(p.bp, g.C->bs) : p.sd;
  p.saux = g.aux ? inner_stride(p.bp, g.aux->bs) : 0;
  // Every batch instance's start address counts (outer and inner strides, conservatively).
  const auto ld_if = [](int64_t cols, int64_t ld) { return cols > 1 ? ld : 0; };
  p.al_a = alignment(p.MA->base, p.MA->bs, ld_if(p.A.cols, p.A.ld), p.in_es);
  p.al_b = alignment(p.MB->base, p.MB->bs, ld_if(p.B.cols, p.B.ld), p.in_es);
  p.al_d = alignment(g.D.base, g.D.bs, ld_if(p.n, p.ldd), p.out_es);
  p.al_c = g.C ? alignment(g.C->base, g.C->bs, ld_if(p.n, p.ldc), p.out_es) : p.al_d;
  const uint64_t al_bias = g.bias ? alignment(g.bias, g.bias_bs, 0, p.out_es) : 256;
  const uint64_t al_aux = g.aux ? alignment(g.aux->base, g.aux->bs, ld_if(p.n, p.ldaux), p.out_es) : 256;

  p.compute = g.in == DType::kF32 && g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  p.in_t = cuda_type(g.in);
  p.out_t = g.out_f32 ? CUDA_R_32F : cuda_type(g.out);
  p.epi = epilogue_of(g);
  p.key.reserve(30 * 8);
  for (int64_t v : {int64_t(g.in),
                    int64_t(g.out_f32 ? -1 : int(g.out)),
                    int64_t(p.compute),
                    int64_t(p.A.op),
                    int64_t(p.B.op),
                    p.m,
                    p.n,
                    p.k,
                    p.A.ld,
                    p.B.ld,
                    p.ldd,
                    p.bp.inner,
                    p.sa,
                    p.sb,
                    p.sd,
                    p.sbias,
                    int64_t(p.epi),
                    int64_t(g.beta != 0.f),
                    int64_t(g.C != nullptr),
                    p.ldc,
                    p.sc,
                    p.ldaux,
                    p.saux})
    put(p.key, v);
  for (uint64_t v : {p.al_a, p.al_b, p.al_d, al_bias, p.al_c, al_aux}) put(p.key, v);
  return true;
}

std::unique_ptr<LtPlan> make_plan(const LtProblem& p, bool bias, bool aux) {
  auto plan = std::make_unique<LtPlan>();
  DLF_LT(cublasLtMatmulDescCreate(&plan->desc, p.compute, CUDA_R_32F));
  DLF_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.A.op, sizeof p.A.op));
  DLF_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.B.op, sizeof p.B.op));
  DLF_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epi, sizeof p.epi));
  if (bias)
    DLF_LT(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &p.sbias, sizeof p.sbias));
  if (aux) {
    DLF_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ldaux, sizeof p.ldaux));
    DLF_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &p.saux,
                                          sizeof p.saux));
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ldv,
                    int64_t bstride) {
    DLF_LT(cublasLtMatrixLayoutCreate(l, t, uint64_t(rows), uint64_t(cols), ldv));
    const int32_t count = int32_t(p.bp.inner);
    DLF_LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    DLF_LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride, sizeof bstride));
  };
  layout(&plan->a, p.in_t, p.A.rows, p.A.cols, p.A.ld, p.sa);
  layout(&plan->b, p.in_t, p.B.rows, p.B.cols, p.B.ld, p.sb);
  layout(&plan->c, p.out_t, p.m, p.n, p.ldc, p.sc);
  layout(&plan->d, p.out_t, p.m, p.n, p.ldd, p.sd);
  return plan;
}

void set_bias(const LtPlan& plan, const void* bias) {
  DLF_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
}

void set_aux(const LtPlan& plan, void* aux) {
  DLF_LT(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
}

// A problem's entry for the length of one call: its algorithm as chosen so far and a plan
// this call alone uses, handed back to the idle ones at the end.
class PlanLease {
 public:
  PlanLease(DeviceState& ds, const std::string& key) : ds_(ds), key_(key) {
    std::lock_guard<std::mutex> lk(ds.gemm_mu);
    DeviceState::GemmEntry& e = ds.gemms[key];
    chosen = e.chosen;
    epi_unusable = e.epi_unusable;
    res = e.res;
    if (!e.idle.empty()) {
      plan = std::move(e.idle.back());
      e.idle.pop_back();
    }
  }
  ~PlanLease() {
    if (!plan) return;
    try {
      std::lock_guard<std::mutex> lk(ds_.gemm_mu);
      auto& idle = ds_.gemms[key_].idle;
      if (idle.size() < DeviceState::kIdlePlans) idle.push_back(std::move(plan));
    } catch (...) {
      // Out of memory: the plan is destroyed instead of kept (a destructor must not throw).
    }
  }
  PlanLease(const PlanLease&) = delete;
  PlanLease& operator=(const PlanLease&) = delete;

  // Records the choice for every later call of the problem (the first to finish wins).
  void choose(const cublasLtMatmulHeuristicResult_t& r, bool unsafe) {
    std::lock_guard<std::mutex> lk(ds_.gemm_mu);
    DeviceState::GemmEntry& e = ds_.gemms[key_];
    if (!e.chosen) {
      e.chosen = true;
      e.epi_unusable = unsafe;
      e.res = r;
    }
    chosen = true;
    epi_unusable = e.epi_unusable;
    res = e.res;
  }

  bool chosen = false;
  bool epi_unusable = false;
  cublasLtMatmulHeuristicResult_t res{};
  std::unique_ptr<LtPlan> plan;

 private:
  DeviceState& ds_;
  const std::string& key_;
};

// Candidates in the order to try them: the heuristic's, or for large problems the measured
// fastest first (3 interleaved rounds of 2 calls each on the first batch instance, so drift
// hits all alike; D is written, then overwritten by the real call). The heuristic's first
// stays first unless another is faster by more than 3% (timing noise).
std::vector<int> rank_candidates(const Gemm& g, const LtProblem& p, const LtPlan& plan, DeviceState& ds,
                                 const cublasLtMatmulHeuristicResult_t* cands, int found, bool tune, Temp& ws,
                                 cudaStream_t stream) {
  std::vector<int> order;
  for (int c = 0; c < found; ++c) order.push_back(c);
  if (!tune || found < 2) return order;
  const float one = 1.f, zero = 0.f;
  constexpr int kRounds = 3;
  std::vector<cudaEvent_t> ev(size_t(2 * kRounds * found), nullptr);
  for (auto& e : ev) DLF_CUDA(cudaEventCreate(&e));
  std::vector<bool> ok(size_t(found), true);
  auto call = [&](int c) {
    return cublasLtMatmul(ds.lt, plan.desc, &one, p.MA->base, plan.a, p.MB->base, plan.b, &zero, g.D.base, plan.c,
                          g.D.base, plan.d, &cands[c].algo, ws.get(), kLtWorkspaceBytes,
                          stream) == CUBLAS_STATUS_SUCCESS;
  };
  for (int c = 0; c < found; ++c) ok[size_t(c)] = call(c);  // warm-up; a refused candidate is skipped
  for (int r = 0; r < kRounds; ++r)
    for (int c = 0; c < found; ++c) {
      if (!ok[size_t(c)]) continue;
      cudaEventRecord(ev[size_t(2 * (r * found + c))], stream);
      ok[size_t(c)] = call(c) && call(c);
      cudaEventRecord(ev[size_t(2 * (r * found + c) + 1)], stream);
    }
  const bool synced = cudaStreamSynchronize(stream) == cudaSuccess;
  std::vector<std::pair<float, int>> timed;  // (median time, candidate)
  for (int c = 0; c < found && synced; ++c) {
    if (!ok[size_t(c)]) continue;
    float t[kRounds];
    bool good = true;
    for (int r = 0; r < kRounds; ++r)
      good = good && cudaEventElapsedTime(&t[r], ev[size_t(2 * (r * found + c))],
                                          ev[size_t(2 * (r * found + c) + 1)]) == cudaSuccess;
    if (!good) continue;
    std::sort(t, t + kRounds);
    timed.emplace_back(c == 0 ? t[1] * 0.97f : t[1], c);
  }
  cudaGetLastError();
  for (auto& e : ev) cudaEventDestroy(e);
  if (timed.empty()) return {0};
  std::sort(timed.begin(), timed.end());
  order.clear();
  for (const auto& tc : timed) order.push_back(tc.second);
  return order;
}

// The first candidate (in `order`) whose activation epilogue keeps a NaN of A; -1 if none does.
// Runs each on a zero-filled copy of the problem's extents with one NaN at A's start.
int first_nan_keeping(const Gemm& g, const LtProblem& p, const LtPlan& plan, DeviceState& ds,
                      const cublasLtMatmulHeuristicResult_t* cands, const std::vector<int>& order, Temp& ws,
                      cudaStream_t stream) {
  const int64_t cnt = p.bp.inner;
  const int64_t ea = extent(p.A.rows, p.A.cols, p.A.ld, p.sa, cnt), eb = extent(p.B.rows, p.B.cols, p.B.ld, p.sb, cnt);
  // D's buffer serves as C too: as large as either needs.
  const int64_t ed = std::max(extent(p.m, p.n, p.ldd, p.sd, cnt), extent(p.m, p.n, p.ldc, p.sc, cnt));
  const int64_t ebias = g.bias ? p.m + (cnt > 1 ? p.sbias * (cnt - 1) : 0) : 0;
  const int64_t eaux = g.aux ? extent(p.m, p.n, p.ldaux, p.saux, cnt) : 0;
  const size_t in_es = size_t(p.in_es), out_es = size_t(p.out_es);
  Temp pa(ds, size_t(ea) * in_es, stream), pb(ds, size_t(eb) * in_es, stream);
  Temp pd(ds, size_t(ed) * out_es, stream), pbias(ds, size_t(ebias) * out_es, stream);
  Temp paux(ds, size_t(eaux) * out_es, stream);
  static const float kNanF = std::nanf("");
  static const uint16_t kNanBF = 0x7fc0, kNanH = 0x7e00;
  const void* nanp = g.in == DType::kF32    ? static_cast<const void*>(&kNanF)
                     : g.in == DType::kBF16 ? static_cast<const void*>(&kNanBF)
                                            : &kNanH;
  if (g.bias) set_bias(plan, pbias.get());
  if (g.aux) set_aux(plan, paux.get());
  for (int c : order) {
    DLF_CUDA(cudaMemsetAsync(pa.get(), 0, size_t(ea) * in_es, stream));
    DLF_CUDA(cudaMemsetAsync(pb.get(), 0, size_t(eb) * in_es, stream));
    DLF_CUDA(cudaMemsetAsync(pd.get(), 0, size_t(ed) * out_es, stream));
    if (ebias) DLF_CUDA(cudaMemsetAsync(pbias.get(), 0, size_t(ebias) * out_es, stream));
    DLF_CUDA(cudaMemcpyAsync(pa.get(), nanp, in_es, cudaMemcpyHostToDevice, stream));
    const float one = 1.f, beta = g.beta;
    if (cublasLtMatmul(ds.lt, plan.desc, &one, pa.get(), plan.a, pb.get(), plan.b, &beta, pd.get(), plan.c, pd.get(),
                       plan.d, &cands[c].algo, ws.get(), kLtWorkspaceBytes, stream) != CUBLAS_STATUS_SUCCESS)
      continue;
    unsigned char first[4] = {0, 0, 0, 0};
    DLF_CUDA(cudaMemcpyAsync(first, pd.get(), out_es, cudaMemcpyDeviceToHost, stream));
    DLF_CUDA(cudaStreamSynchronize(stream));
    bool is_nan = false;
    if (out_es == 4) {
      float f;
      std::memcpy(&f, first, 4);
      is_nan = std::isnan(f);
    } else {
      uint16_t h;
      std::memcpy(&h, first, 2);
      is_nan = g.out == DType::kBF16 ? ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
                                     : ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu));
    }
    if (is_nan) return c;
  }
  return -1;
}

// Picks the problem's algorithm once (heuristic, timing for large problems, the NaN probe
// for activation epilogues) and records it in the lease.
GemmStatus choose_algo(const Gemm& g, const LtProblem& p, PlanLease& lease, DeviceState& ds, cudaStream_t stream) {
  const bool capt = capturing(stream);
  // Probing an activation epilogue waits for the stream: impossible while it is being captured.
  const bool act = g.act != EpiAct::kNone;
  if (act && capt) return GemmStatus::kEpilogueUnusable;
  const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k) * double(p.bp.inner);
  // Not with an addend: timing runs write D, which may be C; and with a separate C (the
  // residual) the timed choice measured slower than the heuristic's on the H100, timed with
  // beta = 0 (bfloat16 8192x4096x4096: 0.433 against 0.421 ms) and with C read as the real
  // call reads it (0.3957 against 0.3919 ms).
  const bool tune = autotune_enabled() && g.beta == 0.f && flops >= kAutotuneMinFlops && !capt;
  cublasLtMatmulPreference_t pref = nullptr;
  DLF_LT(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer<cublasLtMatmulPreference_t>::type, decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_guard(pref, cublasLtMatmulPreferenceDestroy);
  const uint64_t wsz = kLtWorkspaceBytes;
  // C's own alignment: a residual C at an 8-byte address beside a 256-byte D otherwise gets
  // a kernel that cublasLtMatmul then refuses (CUBLAS_STATUS_NOT_SUPPORTED).
  const uint32_t a32 = uint32_t(p.al_a), b32 = uint32_t(p.al_b), c32 = uint32_t(p.al_c), d32 = uint32_t(p.al_d);
  DLF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
  DLF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof a32));
  DLF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32, sizeof b32));
  DLF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32, sizeof c32));
  DLF_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d32, sizeof d32));
  const LtPlan& plan = *lease.plan;
  // The heuristic reads the bias pointer's alignment (a 16-bit bias at an odd offset needs
  // other kernels) and nothing of its batch stride: it gets the least aligned instance, the
  // key's alignment class. Given the first, a 16-bit bias whose rows are 19 elements apart
  // got a kernel reading 4 bytes at a time, which faulted on the second batch's bias
  // (cudaErrorMisalignedAddress, which ends the CUDA context).
  if (g.bias) set_bias(plan, least_aligned(g.bias, g.bias_bs, p.out_es));
  if (g.aux) set_aux(plan, g.aux->base);
  cublasLtMatmulHeuristicResult_t cands[kAutotuneCandidates];
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ds.lt, plan.desc, plan.a, plan.b, plan.c, plan.d, pref,
                                                           tune || act ? kAutotuneCandidates : 1, cands, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    // No kernel with this epilogue here (GELU has none for float32 on some GPUs): remembered,
    // so that the problem's later calls go straight to the unfused path.
    if (act) lease.choose(cublasLtMatmulHeuristicResult_t{}, true);
    return act ? GemmStatus::kEpilogueUnusable : GemmStatus::kNoAlgo;
  }
  if (!tune && !act) {
    lease.choose(cands[0], false);
    return GemmStatus::kOk;
  }
  Temp ws(ds, kLtWorkspaceBytes, stream);
  const std::vector<int> order = rank_candidates(g, p, plan, ds, cands, found, tune, ws, stream);
  const int chosen = act ? first_nan_keeping(g, p, plan, ds, cands, order, ws, stream) : order.front();
  lease.choose(cands[chosen < 0 ? 0 : chosen], chosen < 0);
  return lease.epi_unusable ? GemmStatus::kEpilogueUnusable : GemmStatus::kOk;
}

// The GEMM itself: one strided-batched cuBLASLt call per outer batch index, with the
// workspace the algorithm asked for (often none).
void enqueue(const Gemm& g, const LtProblem& p, const PlanLease& lease, DeviceState& ds, cudaStream_t stream) {
  const LtPlan& plan = *lease.plan;
  const cublasLtMatmulHeuristicResult_t& res = lease.res;
  Temp ws(ds, res.workspaceSize, stream);
  const float alpha = 1.f, beta = g.beta;
  const Batch& bp = p.bp;
  int64_t outer_count = 1;
  for (int d = 0; d < bp.split; ++d) outer_count *= bp.shape[size_t(d)];
  std::vector<int64_t> idx(size_t(bp.split), 0);
  int64_t last_bias = 0, last_aux = 0;
  for (int64_t it = 0; it < outer_count; ++it) {
    int64_t oa = 0, ob = 0, od = 0, oc = 0, obias = 0, oaux = 0;
    for (int d = 0; d < bp.split; ++d) {
      oa += idx[size_t(d)] * p.MA->bs[size_t(d)];
      ob += idx[size_t(d)] * p.MB->bs[size_t(d)];
      od += idx[size_t(d)] * g.D.bs[size_t(d)];
      if (g.C) oc += idx[size_t(d)] * g.C->bs[size_t(d)];
      if (g.bias) obias += idx[size_t(d)] * g.bias_bs[size_t(d)];
      if (g.aux) oaux += idx[size_t(d)] * g.aux->bs[size_t(d)];
    }
    // Set where the instance moved since the last call: an offset back at 0 (a stride-0
    // outer dim after a strided one, bias [2, 3, 1, N] broadcast over the first) is a move too.
    if (g.bias && (it == 0 || obias != last_bias)) set_bias(plan, g.bias + obias * p.out_es);
    if (g.aux && (it == 0 || oaux != last_aux)) set_aux(plan, g.aux->base + oaux * p.out_es);
    last_bias = obias;
    last_aux = oaux;
    char* dptr = g.D.base + od * p.out_es;
    const char* cptr = g.C ? g.C->base + oc * p.out_es : dptr;
    DLF_LT(cublasLtMatmul(ds.lt, plan.desc, &alpha, p.MA->base + oa * p.in_es, plan.a, p.MB->base + ob * p.in_es,
                          plan.b, &beta, cptr, plan.c, dptr, plan.d, &res.algo, ws.get(), res.workspaceSize, stream));
    for (int d = bp.split - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < bp.shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

}  // namespace

// Gathers a matrix view into a compact temporary over its own batch shape.
Mat gather(const Mat& m, const std::vector<int64_t>& batch_shape, DType dt, Temp& tmp, DeviceState& ds,
           cudaStream_t s) {
  const int nb = int(batch_shape.size());
  View src;
  src.rank = nb + 2;
  std::vector<int64_t> own(size_t(nb) + 2);
  for (int d = 0; d < nb; ++d) {
    own[size_t(d)] = m.bs[size_t(d)] == 0 ? 1 : batch_shape[size_t(d)];
    src.shape[d] = own[size_t(d)];
    src.stride[d] = m.bs[size_t(d)];
  }
  own[size_t(nb)] = m.R;
  own[size_t(nb) + 1] = m.C;
  src.shape[nb] = m.R;
  src.shape[nb + 1] = m.C;
  src.stride[nb] = m.sr;
  src.stride[nb + 1] = m.sc;
  const View dst = compact_view(own.data(), nb + 2);
  tmp.reset(ds, size_t(dst.numel()) * size_t(dsize(dt)));
  copy_view(dt, m.base, src, tmp.get(), dst, 0, s);
  Mat g = m;
  g.base = static_cast<char*>(tmp.get());
  g.sr = m.C;
  g.sc = 1;
  for (int d = 0; d < nb; ++d) g.bs[size_t(d)] = own[size_t(d)] == 1 ? 0 : dst.stride[d];
  return g;
}

// kNoAlgo when cuBLASLt has no algorithm for these layouts, kEpilogueUnusable when an
// activation epilogue was asked for and cannot be used (nothing was enqueued then).
GemmStatus run_gemm(const Gemm& g, DeviceState& ds, cudaStream_t stream) {
  LtProblem p;
  if (!describe(g, p)) return GemmStatus::kNoAlgo;
  PlanLease lease(ds, p.key);
  if (lease.chosen && lease.epi_unusable) return GemmStatus::kEpilogueUnusable;
  if (!lease.plan) lease.plan = make_plan(p, g.bias != nullptr, g.aux != nullptr);
  if (!lease.chosen) {
    const GemmStatus st = choose_algo(g, p, lease, ds, stream);
    if (st != GemmStatus::kOk) return st;
  }
  enqueue(g, p, lease, ds, stream);
  return GemmStatus::kOk;
}

}  // namespace dlfuse_cuda
