// Times the CUDA plugin through the dlfuse C API (op handles, one stream), next to the
// ceilings measured in the same process: device-to-device copy bandwidth and plain cuBLASLt
// GEMMs (no epilogue, and the RELU_BIAS epilogue) on the same shapes and layouts.
// Also checks whether cuBLASLt's RELU epilogue keeps NaN, and spot-checks large outputs.
//
// Timing: CUDA events around `reps` back-to-back calls (host enqueue overlapped), the
// median of `rounds` such batches; inputs rotate over enough buffer sets to exceed L2.
// Output: one JSON object per line on stdout ("row" lines), read by report.py.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfuse/dlfuse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)
#define LT(x)                                                                                    \
  do {                                                                                           \
    cublasStatus_t s_ = (x);                                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, int(s_));     \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)
#define DF(x)                                                                                    \
  do {                                                                                           \
    dlfuse_status_t s_ = (x);                                                                    \
    if (s_ != DLFUSE_STATUS_OK) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, dlfuse_last_error());       \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

cudaStream_t g_stream;
dlfuse_registry_t g_reg;
constexpr size_t kL2Bytes = size_t(50) << 20;

struct Dt {
  const char* name;
  DLDataType dl;
  cudaDataType_t cu;
  int size;
};
const Dt kF32{"float32", {kDLFloat, 32, 1}, CUDA_R_32F, 4};
const Dt kBF16{"bfloat16", {kDLBfloat, 16, 1}, CUDA_R_16BF, 2};
const Dt kF16{"float16", {kDLFloat, 16, 1}, CUDA_R_16F, 2};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Device buffer of n elements filled with uniform [-1, 1) values (never zeros: see METHOD.md).
struct Buf {
  void* p = nullptr;
  size_t n = 0;
  Dt dt;
};
Buf make(size_t n, const Dt& dt, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Buf b;
  b.n = n;
  b.dt = dt;
  CK(cudaMalloc(&b.p, std::max<size_t>(n * dt.size, 1)));
  std::vector<char> h(n * dt.size);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (size_t i = 0; i < n; ++i) {
    const float v = u(rng);
    if (dt.size == 4) std::memcpy(&h[i * 4], &v, 4);
    else if (dt.cu == CUDA_R_16BF) { uint16_t x = to_bf16(v); std::memcpy(&h[i * 2], &x, 2); }
    else { __half x = __float2half(v); std::memcpy(&h[i * 2], &x, 2); }
  }
  CK(cudaMemcpy(b.p, h.data(), h.size(), cudaMemcpyHostToDevice));
  return b;
}
std::vector<float> download(const Buf& b) {
  std::vector<char> h(b.n * b.dt.size);
  CK(cudaMemcpy(h.data(), b.p, h.size(), cudaMemcpyDeviceToHost));
  std::vector<float> f(b.n);
  for (size_t i = 0; i < b.n; ++i) {
    if (b.dt.size == 4) std::memcpy(&f[i], &h[i * 4], 4);
    else if (b.dt.cu == CUDA_R_16BF) { uint16_t x; std::memcpy(&x, &h[i * 2], 2); f[i] = from_bf16(x); }
    else { __half x; std::memcpy(&x, &h[i * 2], 2); f[i] = __half2float(x); }
  }
  return f;
}

struct T {
  std::vector<int64_t> shape;
  DLTensor t{};
  T(void* p, const Dt& dt, std::vector<int64_t> s) : shape(std::move(s)) {
    t.data = p;
    t.device = {kDLCUDA, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dt.dl;
    t.shape = shape.data();
  }
  T(const T& o) : shape(o.shape), t(o.t) { t.shape = shape.data(); }
};

// Median over rounds of the mean time of `reps` calls; call(i) runs repetition i.
double time_ms(const std::function<void(int)>& call, int reps, int rounds = 9) {
  for (int i = 0; i < std::max(3, reps / 4); ++i) call(i);  // warm-up
  CK(cudaStreamSynchronize(g_stream));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> v;
  for (int r = 0; r < rounds; ++r) {
    CK(cudaEventRecord(a, g_stream));
    for (int i = 0; i < reps; ++i) call(i);
    CK(cudaEventRecord(b, g_stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(double(ms) / reps);
  }
  CK(cudaGetLastError());
  std::sort(v.begin(), v.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return v[v.size() / 2];
}

// triton.testing.do_bench's method (what torch_peers.py uses): before each timed call the
// L2 is flushed by zeroing 256 MiB, and each call is timed alone with events; the median.
// Several implementations are interleaved call by call, so clock and thermal drift over the
// run affects them alike.
std::vector<double> time_flushed_ms(const std::vector<std::function<void(int)>>& calls, int n) {
  static void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  if (!flush) CK(cudaMalloc(&flush, flush_bytes));
  for (auto& c : calls)
    for (int i = 0; i < 3; ++i) c(i);
  std::vector<std::vector<double>> t(calls.size());
  std::vector<cudaEvent_t> ev(2 * calls.size() * size_t(n));
  for (auto& e : ev) CK(cudaEventCreate(&e));
  size_t k = 0;
  for (int i = 0; i < n; ++i)
    for (size_t c = 0; c < calls.size(); ++c) {
      CK(cudaMemsetAsync(flush, 0, flush_bytes, g_stream));
      CK(cudaEventRecord(ev[k], g_stream));
      calls[c](i);
      CK(cudaEventRecord(ev[k + 1], g_stream));
      k += 2;
    }
  CK(cudaStreamSynchronize(g_stream));
  k = 0;
  for (int i = 0; i < n; ++i)
    for (size_t c = 0; c < calls.size(); ++c) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
      t[c].push_back(ms);
      k += 2;
    }
  for (auto& e : ev) cudaEventDestroy(e);
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

int sets_for(size_t bytes_per_set) { return int(std::min<size_t>(16, std::max<size_t>(1, 2 * kL2Bytes / std::max<size_t>(bytes_per_set, 1) + 1))); }
int reps_for(double est_us) { return int(std::clamp(20000.0 / std::max(est_us, 1.0), 10.0, 200.0)); }

void row(const char* op, const Dt& dt, const std::string& shape, const std::string& impl, double ms,
         const std::string& extra = "") {
  std::printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", \"ms\": %.6f%s%s}\n", op,
              dt.name, shape.c_str(), impl.c_str(), ms, extra.empty() ? "" : ", ", extra.c_str());
  std::fflush(stdout);
}

// ---- plain cuBLASLt on row-major A[M,K] B[K,N] -> D[M,N]: D^T = B^T A^T in column-major.
struct LtGemm {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulHeuristicResult_t res;
  void* ws;
  size_t wss = size_t(32) << 20;
  // tune: time the heuristic's first 8 candidates once and keep the fastest (as the plugin
  // does for large problems), else the heuristic's first answer.
  LtGemm(cublasLtHandle_t handle, int64_t M, int64_t K, int64_t N, const Dt& dt, cublasLtEpilogue_t epi, const void* bias,
         bool tune = false, const void* A = nullptr, const void* B = nullptr, void* D = nullptr) : h(handle) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    LT(cublasLtMatrixLayoutCreate(&la, dt.cu, N, K, N));  // B^T
    LT(cublasLtMatrixLayoutCreate(&lb, dt.cu, K, M, K));  // A^T
    LT(cublasLtMatrixLayoutCreate(&ld, dt.cu, N, M, N));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss));
    int found = 0;
    cublasLtMatmulHeuristicResult_t cands[8];
    LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, tune ? 8 : 1, cands, &found));
    if (!found) { std::fprintf(stderr, "no cuBLASLt algo\n"); std::exit(2); }
    cublasLtMatmulPreferenceDestroy(pref);
    CK(cudaMalloc(&ws, wss));
    res = cands[0];
    if (tune) {
      double best = 1e30;
      for (int c = 0; c < found; ++c) {
        res = cands[c];
        const double t = time_ms([&](int) { run(A, B, D); }, 5, 3);
        if (t < best) { best = t; best_idx = c; }
      }
      res = cands[best_idx];
    }
  }
  int best_idx = 0;
  void run(const void* A, const void* B, void* D) {
    const float one = 1.f, zero = 0.f;
    LT(cublasLtMatmul(h, desc, &one, B, la, A, lb, &zero, D, ld, D, ld, &res.algo, ws, wss, g_stream));
  }
  ~LtGemm() {
    cudaFree(ws);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
};

void set_nan_bf16_or_f32(const Buf& b, size_t i) {
  if (b.dt.size == 4) { const float n = NAN; CK(cudaMemcpy(static_cast<char*>(b.p) + i * 4, &n, 4, cudaMemcpyHostToDevice)); }
  else { const uint16_t n = 0x7fc0; CK(cudaMemcpy(static_cast<char*>(b.p) + i * 2, &n, 2, cudaMemcpyHostToDevice)); }
}

// Does the RELU(_BIAS) epilogue keep NaN? Row 0 of A is NaN, so row 0 of D must be NaN.
void relu_epilogue_nan_probe(cublasLtHandle_t lt, int64_t M, int64_t K, int64_t N, const Dt& dt) {
  Buf A = make(size_t(M * K), dt, 11), B = make(size_t(K * N), dt, 12), bias = make(size_t(N), dt, 13);
  Buf D = make(size_t(M * N), dt, 14);
  set_nan_bf16_or_f32(A, 0);
  LtGemm g(lt, M, K, N, dt, CUBLASLT_EPILOGUE_RELU_BIAS, bias.p);
  g.run(A.p, B.p, D.p);
  CK(cudaStreamSynchronize(g_stream));
  const std::vector<float> d = download(D);
  size_t nan_row0 = 0, zero_row0 = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (std::isnan(d[size_t(n)])) ++nan_row0;
    else if (d[size_t(n)] == 0.f) ++zero_row0;
  }
  char extra[256];
  std::snprintf(extra, sizeof extra, "\"nan_expected\": %lld, \"nan_got\": %zu, \"zero_instead\": %zu",
                (long long)N, nan_row0, zero_row0);
  row("relu_epilogue_nan_probe", dt, std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N), "cublaslt_relu_bias", 0, extra);
  for (Buf* b : {&A, &B, &bias, &D}) cudaFree(b->p);
}

void bench_matmul(cublasLtHandle_t lt, dlfuse_op_t fwd, dlfuse_op_t bwd, int64_t M, int64_t K, int64_t N, const Dt& dt,
                  bool with_bwd) {
  const std::string shape = std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
  const size_t set_bytes = size_t(M * K + K * N + M * N + N) * dt.size;
  const int sets = sets_for(set_bytes);
  std::vector<Buf> A, B, bias, D;
  for (int s = 0; s < sets; ++s) {
    A.push_back(make(size_t(M * K), dt, 100 + s));
    B.push_back(make(size_t(K * N), dt, 200 + s));
    bias.push_back(make(size_t(N), dt, 300 + s));
    D.push_back(make(size_t(M * N), dt, 400 + s));
  }
  const double flops = 2.0 * M * N * K;
  const double est_us = flops / (dt.size == 4 ? 40e12 : 500e12) * 1e6 + 10;
  const int reps = reps_for(est_us);
  // Plain GEMM (no bias, no relu) and the cuBLASLt RELU_BIAS epilogue, same layouts.
  {
    LtGemm plain(lt, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr);
    const double t = time_ms([&](int i) { plain.run(A[i % sets].p, B[i % sets].p, D[i % sets].p); }, reps);
    row("matmul_add_relu.fwd", dt, shape, "cublaslt_gemm_only", t);
    LtGemm tuned(lt, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr, true, A[0].p, B[0].p, D[0].p);
    const double t2 = time_ms([&](int i) { tuned.run(A[i % sets].p, B[i % sets].p, D[i % sets].p); }, reps);
    row("matmul_add_relu.fwd", dt, shape, "cublaslt_gemm_only_tuned", t2, "\"candidate\": " + std::to_string(tuned.best_idx));
  }
  {
    std::vector<std::unique_ptr<LtGemm>> g;
    for (int s = 0; s < sets; ++s) g.emplace_back(new LtGemm(lt, M, K, N, dt, CUBLASLT_EPILOGUE_RELU_BIAS, bias[s].p));
    const double t = time_ms([&](int i) { g[i % sets]->run(A[i % sets].p, B[i % sets].p, D[i % sets].p); }, reps);
    row("matmul_add_relu.fwd", dt, shape, "cublaslt_relu_bias_epilogue", t);
  }
  std::vector<T> ta, tb, tbias, td;
  for (int s = 0; s < sets; ++s) {
    ta.emplace_back(A[s].p, dt, std::vector<int64_t>{M, K});
    tb.emplace_back(B[s].p, dt, std::vector<int64_t>{K, N});
    tbias.emplace_back(bias[s].p, dt, std::vector<int64_t>{N});
    td.emplace_back(D[s].p, dt, std::vector<int64_t>{M, N});
  }
  auto call_fwd = [&](int i) {
    const int s = i % sets;
    const DLTensor* in[3] = {&ta[s].t, &tb[s].t, &tbias[s].t};
    DLTensor* out[1] = {&td[s].t};
    DF(dlfuse_op_call(fwd, in, 3, out, 1, nullptr, 0, g_stream));
  };
  const double t = time_ms(call_fwd, reps);
  row("matmul_add_relu.fwd", dt, shape, "dlfuse_cuda", t, "\"tflops\": " + std::to_string(flops / t / 1e9));
  {
    // Same comparison, do_bench's method, interleaved: plain GEMM vs the plugin vs RELU_BIAS.
    LtGemm plain(lt, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr);
    LtGemm tuned(lt, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr, true, A[0].p, B[0].p, D[0].p);
    LtGemm epi(lt, M, K, N, dt, CUBLASLT_EPILOGUE_RELU_BIAS, bias[0].p);
    const int n = int(std::clamp(2.0e5 / est_us, 30.0, 200.0));
    const std::vector<double> f = time_flushed_ms(
        {[&](int) { plain.run(A[0].p, B[0].p, D[0].p); }, [&](int) { tuned.run(A[0].p, B[0].p, D[0].p); },
         [&](int) { epi.run(A[0].p, B[0].p, D[0].p); }, [&](int) { call_fwd(0); }},
        n);
    row("matmul_add_relu.fwd.flushed", dt, shape, "cublaslt_gemm_only", f[0]);
    row("matmul_add_relu.fwd.flushed", dt, shape, "cublaslt_gemm_only_tuned", f[1]);
    row("matmul_add_relu.fwd.flushed", dt, shape, "cublaslt_relu_bias_epilogue", f[2]);
    row("matmul_add_relu.fwd.flushed", dt, shape, "dlfuse_cuda", f[3]);
  }
  // Spot check of set 0 against a float64 dot product on the host (a few hundred elements).
  {
    call_fwd(0);
    CK(cudaStreamSynchronize(g_stream));
    const std::vector<float> a = download(A[0]), b = download(B[0]), bb = download(bias[0]), d = download(D[0]);
    double worst = 0;
    std::mt19937_64 rng(7);
    for (int t2 = 0; t2 < 256; ++t2) {
      const int64_t m = int64_t(rng() % uint64_t(M)), n = int64_t(rng() % uint64_t(N));
      double acc = bb[size_t(n)], mag = std::fabs(bb[size_t(n)]);
      for (int64_t k = 0; k < K; ++k) {
        acc += double(a[size_t(m * K + k)]) * b[size_t(k * N + n)];
        mag += std::fabs(double(a[size_t(m * K + k)]) * b[size_t(k * N + n)]);
      }
      const double ref = acc > 0 ? acc : 0;
      worst = std::max(worst, std::fabs(d[size_t(m * N + n)] - ref) / mag);
    }
    row("matmul_add_relu.fwd.check", dt, shape, "dlfuse_cuda", 0, "\"max_err_over_sum_abs\": " + std::to_string(worst));
  }
  {  // NaN through the plugin at this shape: A[0, 0] = NaN makes row 0 of out NaN.
    set_nan_bf16_or_f32(A[0], 0);
    call_fwd(0);
    CK(cudaStreamSynchronize(g_stream));
    const std::vector<float> d = download(D[0]);
    size_t nan_row0 = 0, nan_elsewhere = 0;
    for (size_t i = 0; i < d.size(); ++i) (i < size_t(N) ? nan_row0 : nan_elsewhere) += std::isnan(d[i]) ? 1 : 0;
    row("matmul_add_relu.fwd.nan_probe", dt, shape, "dlfuse_cuda", 0,
        "\"nan_expected\": " + std::to_string(N) + ", \"nan_got\": " + std::to_string(nan_row0) +
            ", \"nan_elsewhere\": " + std::to_string(nan_elsewhere));
    Buf fresh = make(size_t(M * K), dt, 100);  // finite values again for the backward
    CK(cudaMemcpy(A[0].p, fresh.p, size_t(M * K) * dt.size, cudaMemcpyDeviceToDevice));
    cudaFree(fresh.p);
  }
  if (with_bwd) {
    // grad_out = D of another set; out = D of this set (as saved by a forward).
    std::vector<Buf> G, GA, GB, GBias;
    for (int s = 0; s < sets; ++s) {
      G.push_back(make(size_t(M * N), dt, 500 + s));
      GA.push_back(make(size_t(M * K), dt, 600 + s));
      GB.push_back(make(size_t(K * N), dt, 700 + s));
      GBias.push_back(make(size_t(N), dt, 800 + s));
    }
    std::vector<T> tg, tga, tgb, tgbias;
    for (int s = 0; s < sets; ++s) {
      call_fwd(s);
      tg.emplace_back(G[s].p, dt, std::vector<int64_t>{M, N});
      tga.emplace_back(GA[s].p, dt, std::vector<int64_t>{M, K});
      tgb.emplace_back(GB[s].p, dt, std::vector<int64_t>{K, N});
      tgbias.emplace_back(GBias[s].p, dt, std::vector<int64_t>{N});
    }
    const double tb_ = time_ms(
        [&](int i) {
          const int s = i % sets;
          const DLTensor* in[4] = {&tg[s].t, &ta[s].t, &tb[s].t, &td[s].t};
          DLTensor* out[3] = {&tga[s].t, &tgb[s].t, &tgbias[s].t};
          DF(dlfuse_op_call(bwd, in, 4, out, 3, nullptr, 0, g_stream));
        },
        std::max(10, reps / 2));
    row("matmul_add_relu.bwd", dt, shape, "dlfuse_cuda", tb_, "\"tflops\": " + std::to_string(2 * flops / tb_ / 1e9));
    for (auto* v : {&G, &GA, &GB, &GBias})
      for (Buf& b : *v) cudaFree(b.p);
  }
  for (auto* v : {&A, &B, &bias, &D})
    for (Buf& b : *v) cudaFree(b.p);
}

float act_ref(int act, float p) {
  switch (act) {
    case DLFUSE_ACT_RELU: return std::isnan(p) ? p : (p > 0 ? p : 0);
    case DLFUSE_ACT_SIGMOID: return 1.f / (1.f + std::exp(-p));
    default: return p;
  }
}

void bench_add_mul(dlfuse_op_t fwd, dlfuse_op_t bwd, int64_t M, int64_t N, const Dt& dt, int act, double copy_tbps) {
  const char* an = act == DLFUSE_ACT_RELU ? "relu" : "sigmoid";
  const std::string shape = std::to_string(M) + "x" + std::to_string(N);
  const size_t mn = size_t(M * N);
  const size_t set_bytes = (4 * mn + N) * dt.size;
  const int sets = sets_for(set_bytes);
  std::vector<Buf> X, Y, Bi, O, G, GX, GY, GB;
  for (int s = 0; s < sets; ++s) {
    X.push_back(make(mn, dt, 1000 + s));
    Y.push_back(make(mn, dt, 1100 + s));
    Bi.push_back(make(size_t(N), dt, 1200 + s));
    O.push_back(make(mn, dt, 1300 + s));
  }
  std::vector<T> tx, ty, tb, to;
  for (int s = 0; s < sets; ++s) {
    tx.emplace_back(X[s].p, dt, std::vector<int64_t>{M, N});
    ty.emplace_back(Y[s].p, dt, std::vector<int64_t>{M, N});
    tb.emplace_back(Bi[s].p, dt, std::vector<int64_t>{N});
    to.emplace_back(O[s].p, dt, std::vector<int64_t>{M, N});
  }
  dlfuse_attr_t attrs[2] = {};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION; attrs[0].type = DLFUSE_ATTR_INT64; attrs[0].value.i64 = act;
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER; attrs[1].type = DLFUSE_ATTR_FLOAT64; attrs[1].value.f64 = 0.5;
  const double fbytes = double(3 * mn + N) * dt.size;
  const int reps = reps_for(fbytes / 2.8e12 * 1e6 + 5);
  auto call_fwd = [&](int i) {
    const int s = i % sets;
    const DLTensor* in[3] = {&tx[s].t, &ty[s].t, &tb[s].t};
    DLTensor* out[1] = {&to[s].t};
    DF(dlfuse_op_call(fwd, in, 3, out, 1, attrs, 2, g_stream));
  };
  const double t = time_ms(call_fwd, reps);
  const double floor_ms = fbytes / (copy_tbps * 1e12) * 1e3;
  row((std::string("add_mul_") + an + ".fwd").c_str(), dt, shape, "dlfuse_cuda", t,
      "\"TBps\": " + std::to_string(fbytes / t / 1e9) + ", \"copy_floor_ms\": " + std::to_string(floor_ms) +
          ", \"pct_of_copy_bw\": " + std::to_string(100.0 * floor_ms / t));
  {  // spot check
    call_fwd(0);
    CK(cudaStreamSynchronize(g_stream));
    const std::vector<float> x = download(X[0]), y = download(Y[0]), b = download(Bi[0]), o = download(O[0]);
    double worst = 0;
    for (size_t i = 0; i < mn; i += 997) {
      const float ref = act_ref(act, x[i] + b[i % size_t(N)] + 0.5f * y[i]);
      worst = std::max(worst, double(std::fabs(o[i] - ref)) / (std::fabs(ref) + 1e-3));
    }
    row((std::string("add_mul_") + an + ".fwd.check").c_str(), dt, shape, "dlfuse_cuda", 0,
        "\"max_rel_err\": " + std::to_string(worst));
  }
  for (int s = 0; s < sets; ++s) {
    G.push_back(make(mn, dt, 1400 + s));
    GX.push_back(make(mn, dt, 1500 + s));
    GY.push_back(make(mn, dt, 1600 + s));
    GB.push_back(make(size_t(N), dt, 1700 + s));
  }
  std::vector<T> tg, tgx, tgy, tgb;
  for (int s = 0; s < sets; ++s) {
    tg.emplace_back(G[s].p, dt, std::vector<int64_t>{M, N});
    tgx.emplace_back(GX[s].p, dt, std::vector<int64_t>{M, N});
    tgy.emplace_back(GY[s].p, dt, std::vector<int64_t>{M, N});
    tgb.emplace_back(GB[s].p, dt, std::vector<int64_t>{N});
  }
  // Full backward: read grad_out, x, y; write grad_x, grad_y, grad_bias (5 streams).
  const double bbytes = double(5 * mn + 2 * N) * dt.size;
  const double tb_ = time_ms(
      [&](int i) {
        const int s = i % sets;
        const DLTensor* in[4] = {&tg[s].t, &tx[s].t, &ty[s].t, &tb[s].t};
        DLTensor* out[3] = {&tgx[s].t, &tgy[s].t, &tgb[s].t};
        DF(dlfuse_op_call(bwd, in, 4, out, 3, attrs, 2, g_stream));
      },
      reps);
  row((std::string("add_mul_") + an + ".bwd").c_str(), dt, shape, "dlfuse_cuda", tb_,
      "\"TBps\": " + std::to_string(bbytes / tb_ / 1e9) + ", \"copy_floor_ms\": " +
          std::to_string(bbytes / (copy_tbps * 1e12) * 1e3));
  // The anchor's backward moves 4 streams (grad_out and out in, dx and dy out); ours needs x
  // and y to recompute pre. The closest like-for-like: grad_x and grad_bias only (4 streams).
  const double tb2 = time_ms(
      [&](int i) {
        const int s = i % sets;
        const DLTensor* in[4] = {&tg[s].t, &tx[s].t, &ty[s].t, &tb[s].t};
        DLTensor* out[3] = {&tgx[s].t, nullptr, &tgb[s].t};
        DF(dlfuse_op_call(bwd, in, 4, out, 3, attrs, 2, g_stream));
      },
      reps);
  row((std::string("add_mul_") + an + ".bwd_no_grad_y").c_str(), dt, shape, "dlfuse_cuda", tb2,
      "\"TBps\": " + std::to_string(double(4 * mn + 2 * N) * dt.size / tb2 / 1e9));
  for (auto* v : {&X, &Y, &Bi, &O, &G, &GX, &GY, &GB})
    for (Buf& b : *v) cudaFree(b.p);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d}\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize);
  DF(dlfuse_registry_create(nullptr, &g_reg));
  DF(dlfuse_registry_prefer(g_reg, nullptr, "cuda"));
  dlfuse_op_t mf, mb, af, ab;
  DF(dlfuse_op_get(g_reg, DLFUSE_OP_MATMUL_ADD_RELU, &mf));
  DF(dlfuse_op_get(g_reg, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, &mb));
  DF(dlfuse_op_get(g_reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &af));
  DF(dlfuse_op_get(g_reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &ab));
  int32_t chosen = -1;
  DF(dlfuse_op_resolve(mf, kDLCUDA, kBF16.dl, &chosen));
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  DF(dlfuse_registry_plugin_info(g_reg, chosen, &info));
  std::printf("{\"plugin\": \"%s\", \"path\": \"%s\"}\n", info.name, info.path);

  // Copy ceiling: 1 GiB device-to-device, bytes read + written.
  double copy_tbps = 0;
  {
    const size_t n = size_t(1) << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    const double t = time_ms([&](int) { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g_stream)); }, 20, 7);
    copy_tbps = 2.0 * n / (t * 1e-3) / 1e12;
    std::printf("{\"op\": \"copy\", \"bytes\": %zu, \"ms\": %.6f, \"TBps\": %.4f}\n", n, t, copy_tbps);
    cudaFree(a);
    cudaFree(b);
  }
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  for (const Dt* dt : {&kF32, &kBF16}) relu_epilogue_nan_probe(lt, 64, 64, 64, *dt);
  relu_epilogue_nan_probe(lt, 8192, 4096, 4096, kBF16);

  const int64_t mm[3][3] = {{2048, 512, 256}, {4096, 1024, 1024}, {8192, 4096, 4096}};
  for (const Dt* dt : {&kBF16, &kF32})
    for (auto& s : mm) {
      if (quick && s[0] != 8192) continue;
      bench_matmul(lt, mf, mb, s[0], s[1], s[2], *dt, true);
    }
  const int64_t am[3][2] = {{128, 512}, {2048, 512}, {16384, 8192}};
  for (const Dt* dt : {&kF32, &kBF16})
    for (auto& s : am)
      for (int act : {int(DLFUSE_ACT_RELU), int(DLFUSE_ACT_SIGMOID)}) {
        if (quick && s[0] != 16384) continue;
        bench_add_mul(af, ab, s[0], s[1], *dt, act, copy_tbps);
      }
  cublasLtDestroy(lt);
  dlfuse_registry_destroy(g_reg);
  return 0;
}
