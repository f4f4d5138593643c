// cuBLASLt peer of bench/run.py (built only with DLFUSE_WITH_CUDA): what a cuBLASLt user
// gets for matmul_add_relu forward on the same shapes and row-major layouts as the driver,
// in the driver's row format and timing (bench/driver/timing.hpp):
//   cublaslt_gemm_only            plain GEMM (no bias, no relu), the heuristic's first algorithm
//   cublaslt_gemm_only_tuned      the fastest of the heuristic's first 8 candidates (timed once)
//   cublaslt_relu_bias_epilogue   GEMM with the RELU_BIAS epilogue
// dir "fwd_flushed": the same three and, with --dlfuse PLUGIN.so, the CUDA plugin through the
// C API, timed by triton.testing.do_bench's method: the L2 flushed by zeroing 256 MiB before
// every call, each call timed alone by CUDA events (device time, no host cost), the
// implementations interleaved call by call so that clock and power drift hit them alike.
// Check rows: does the RELU_BIAS epilogue keep relu(NaN) = NaN (row 0 of A NaN -> row 0 of D)?
//
//   dlfuse_bench_cublaslt [--mode quick|full] [--shapes MxKxN,...] [--dtypes float32,bfloat16]
//                         [--dlfuse libdlfuse_cuda.so]
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfuse/dlfuse.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "../driver/timing.hpp"

namespace {

using namespace bench;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dlfuse_bench_cublaslt: %s\n", what.c_str());
  std::exit(1);
}
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(std::string(what) + ": cublas status " + std::to_string(int(s)));
}

cudaStream_t g_stream;

struct Dt {
  const char* name;
  DLDataType dl;
  cudaDataType_t cu;
  int size;
};
const Dt kDts[] = {{"float32", {kDLFloat, 32, 1}, CUDA_R_32F, 4}, {"bfloat16", {kDLBfloat, 16, 1}, CUDA_R_16BF, 2}};

// A device buffer of n values uniform in [-1, 1) (never zeros: they can run faster).
struct Buf {
  void* p = nullptr;
  Buf(size_t n, const Dt& dt, uint64_t seed) {
    ck(cudaMalloc(&p, std::max<size_t>(n * size_t(dt.size), 1)), "cudaMalloc");
    std::vector<unsigned char> h(n * size_t(dt.size));
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const float v = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      if (dt.size == 4)
        std::memcpy(&h[i * 4], &u, 4);
      else {
        const uint16_t b = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        std::memcpy(&h[i * 2], &b, 2);
      }
    }
    ck(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
};

// Device time of `reps` back-to-back calls by CUDA events, per call.
double event_ms(const std::function<void()>& call, int reps) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  call();
  ck(cudaEventRecord(a, g_stream), "event");
  for (int i = 0; i < reps; ++i) call();
  ck(cudaEventRecord(b, g_stream), "event");
  ck(cudaEventSynchronize(b), "event");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, a, b), "event");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / reps;
}

// Row-major A[M,K] B[K,N] -> D[M,N], computed as the column-major D^T = B^T A^T.
struct LtGemm {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  void* ws = nullptr;
  size_t wss = size_t(32) << 20;
  int candidate = 0;
  // tune: time the heuristic's first 8 candidates on (A, B, D) and keep the fastest, as the
  // plugin does for large problems; else the heuristic's first answer.
  LtGemm(cublasLtHandle_t handle, int64_t M, int64_t K, int64_t N, const Dt& dt, cublasLtEpilogue_t epi,
         const void* bias, bool tune, const void* A, const void* B, void* D)
      : h(handle) {
    lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    if (bias) lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
    lt(cublasLtMatrixLayoutCreate(&la, dt.cu, uint64_t(N), uint64_t(K), N), "layout");  // B^T
    lt(cublasLtMatrixLayoutCreate(&lb, dt.cu, uint64_t(K), uint64_t(M), K), "layout");  // A^T
    lt(cublasLtMatrixLayoutCreate(&ld, dt.cu, uint64_t(N), uint64_t(M), N), "layout");
    cublasLtMatmulPreference_t pref;
    lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss), "ws");
    cublasLtMatmulHeuristicResult_t cands[8];
    int found = 0;
    lt(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, tune ? 8 : 1, cands, &found), "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (!found) die("no cuBLASLt algorithm");
    ck(cudaMalloc(&ws, wss), "cudaMalloc");
    algo = cands[0].algo;
    double best = 1e30;
    for (int c = 0; tune && c < found; ++c) {
      algo = cands[c].algo;
      const double t = event_ms([&] { run(A, B, D); }, 5);
      if (t < best) best = t, candidate = c;
    }
    algo = cands[candidate].algo;
  }
  void run(const void* A, const void* B, void* D) {
    const float one = 1.f, zero = 0.f;
    lt(cublasLtMatmul(h, desc, &one, B, la, A, lb, &zero, D, ld, D, ld, &algo, ws, wss, g_stream), "matmul");
  }
  ~LtGemm() {
    cudaFree(ws);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
};

// Median, p10, p90 of each call timed alone after an L2 flush, the calls interleaved.
std::vector<Stats> time_flushed(const std::vector<std::function<void()>>& calls, int n) {
  static void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  if (!flush) ck(cudaMalloc(&flush, flush_bytes), "cudaMalloc");
  for (auto& c : calls) c();
  std::vector<cudaEvent_t> ev(2 * calls.size() * size_t(n));
  for (auto& e : ev) ck(cudaEventCreate(&e), "event");
  for (size_t k = 0, i = 0; i < size_t(n); ++i)
    for (auto& c : calls) {
      ck(cudaMemsetAsync(flush, 0, flush_bytes, g_stream), "memset");
      ck(cudaEventRecord(ev[k++], g_stream), "event");
      c();
      ck(cudaEventRecord(ev[k++], g_stream), "event");
    }
  ck(cudaStreamSynchronize(g_stream), "sync");
  std::vector<std::vector<double>> t(calls.size());
  for (size_t k = 0, i = 0; i < size_t(n); ++i)
    for (size_t c = 0; c < calls.size(); ++c, k += 2) {
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]), "event");
      t[c].push_back(double(ms) * 1e-3);
    }
  for (auto& e : ev) cudaEventDestroy(e);
  std::vector<Stats> out;
  for (auto& v : t) out.push_back(stats_of(v));
  return out;
}

// Does the RELU_BIAS epilogue keep NaN? A[0, 0] = NaN makes all of row 0 of D NaN in exact
// arithmetic; a kernel whose relu is max(x, 0) returns 0 there instead.
void nan_probe(cublasLtHandle_t h, int64_t M, int64_t K, int64_t N, const Dt& dt) {
  Buf A(size_t(M * K), dt, 11), B(size_t(K * N), dt, 12), bias(size_t(N), dt, 13), D(size_t(M * N), dt, 14);
  const uint32_t nan32 = 0x7fc00000u;
  const uint16_t nan16 = 0x7fc0;
  ck(cudaMemcpy(A.p, dt.size == 4 ? static_cast<const void*>(&nan32) : &nan16, size_t(dt.size), cudaMemcpyHostToDevice),
     "cudaMemcpy");
  LtGemm g(h, M, K, N, dt, CUBLASLT_EPILOGUE_RELU_BIAS, bias.p, false, nullptr, nullptr, nullptr);
  g.run(A.p, B.p, D.p);
  std::vector<unsigned char> row0(size_t(N) * size_t(dt.size));
  ck(cudaMemcpyAsync(row0.data(), D.p, row0.size(), cudaMemcpyDeviceToHost, g_stream), "cudaMemcpy");
  ck(cudaStreamSynchronize(g_stream), "sync");
  int64_t nan = 0, zero = 0;
  for (int64_t n = 0; n < N; ++n) {
    uint32_t u = 0;
    std::memcpy(&u, &row0[size_t(n) * size_t(dt.size)], size_t(dt.size));
    if (dt.size == 2) u <<= 16;
    float f;
    std::memcpy(&f, &u, 4);
    nan += std::isnan(f) ? 1 : 0;
    zero += f == 0.f ? 1 : 0;
  }
  std::printf(
      "{\"check\": \"relu_epilogue_nan_probe\", \"impl\": \"cublaslt_relu_bias_epilogue\", \"dtype\": \"%s\", "
      "\"shape\": \"%s\", \"nan_expected\": %lld, \"nan_got\": %lld, \"zero_instead\": %lld, \"ok\": %s}\n",
      dt.name, dims_str({M, K, N}).c_str(), (long long)N, (long long)nan, (long long)zero, nan == N ? "true" : "false");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes_arg, plugin;
  std::vector<std::string> dtypes{"float32", "bfloat16"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc && parse_mode(argv[i + 1]))
      ++i;
    else if (a == "--shapes" && i + 1 < argc)
      shapes_arg = argv[++i];
    else if (a == "--dtypes" && i + 1 < argc)
      dtypes = split_list(argv[++i]);
    else if (a == "--dlfuse" && i + 1 < argc)
      plugin = argv[++i];
    else
      die("usage: dlfuse_bench_cublaslt [--mode quick|full] [--shapes LIST] [--dtypes LIST] [--dlfuse PLUGIN.so]");
  }
  ck(cudaSetDevice(0), "cudaSetDevice");
  ck(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "stream");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("{\"peer\": \"cublaslt\", \"version\": %d, \"gpu\": \"%s\"}\n", int(cublasLtGetVersion()), prop.name);
  cublasLtHandle_t h;
  lt(cublasLtCreate(&h), "cublasLtCreate");
  dlfuse_registry_t reg = nullptr;
  dlfuse_op_t mf = nullptr;
  if (!plugin.empty()) {  // the CUDA plugin on this program's stream, for the flushed comparison
    dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, plugin.c_str()};
    if (dlfuse_registry_create(&opt, &reg) != DLFUSE_STATUS_OK ||
        dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &mf) != DLFUSE_STATUS_OK)
      die(std::string("dlfuse: ") + dlfuse_last_error());
  }
  const auto sync = [] { ck(cudaStreamSynchronize(g_stream), "sync"); };
  const auto shapes = shapes_arg.empty()
                          ? std::vector<std::vector<int64_t>>{{2048, 512, 256}, {4096, 1024, 1024}, {8192, 4096, 4096}}
                          : parse_shapes(shapes_arg);
  for (const std::string& dn : dtypes) {
    const Dt* dtp = nullptr;
    for (const Dt& d : kDts)
      if (dn == d.name) dtp = &d;
    if (!dtp) die("unknown dtype '" + dn + "' (expected float32 or bfloat16)");
    const Dt& dt = *dtp;
    nan_probe(h, 64, 64, 64, dt);
    for (const auto& s : shapes) {
      if (s.size() != 3) continue;  // add_mul shapes: no cuBLASLt counterpart
      const int64_t M = s[0], K = s[1], N = s[2];
      const std::string shape = dims_str(s);
      const int sets = sets_for(size_t(M * K + K * N + M * N + N) * size_t(dt.size));
      std::vector<std::unique_ptr<Buf>> A, B, Bi, D;
      for (int i = 0; i < sets; ++i) {
        A.emplace_back(new Buf(size_t(M * K), dt, 100 + uint64_t(i)));
        B.emplace_back(new Buf(size_t(K * N), dt, 200 + uint64_t(i)));
        Bi.emplace_back(new Buf(size_t(N), dt, 300 + uint64_t(i)));
        D.emplace_back(new Buf(size_t(M * N), dt, 400 + uint64_t(i)));
      }
      LtGemm plain(h, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr, false, nullptr, nullptr, nullptr);
      LtGemm tuned(h, M, K, N, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr, true, A[0]->p, B[0]->p, D[0]->p);
      std::vector<std::unique_ptr<LtGemm>> epi;  // the bias pointer is part of the descriptor
      for (int i = 0; i < sets; ++i)
        epi.emplace_back(new LtGemm(h, M, K, N, dt, CUBLASLT_EPILOGUE_RELU_BIAS, Bi[size_t(i)]->p, false, nullptr,
                                    nullptr, nullptr));
      int batch = 0;
      const std::string cand = ", \"candidate\": " + std::to_string(tuned.candidate);
      for (auto [impl, g, extra] : {std::tuple{"cublaslt_gemm_only", &plain, std::string()},
                                    std::tuple{"cublaslt_gemm_only_tuned", &tuned, cand}}) {
        const Stats st = time_calls(
            [&, g = g](int i) { g->run(A[size_t(i % sets)]->p, B[size_t(i % sets)]->p, D[size_t(i % sets)]->p); }, sync,
            &batch);
        row("matmul_add_relu", "fwd", dt.name, shape, impl, "cuda:0", st, batch, extra);
      }
      const Stats st = time_calls(
          [&](int i) {
            epi[size_t(i % sets)]->run(A[size_t(i % sets)]->p, B[size_t(i % sets)]->p, D[size_t(i % sets)]->p);
          },
          sync, &batch);
      row("matmul_add_relu", "fwd", dt.name, shape, "cublaslt_relu_bias_epilogue", "cuda:0", st, batch);
      nan_probe(h, M, K, N, dt);

      std::vector<std::function<void()>> calls = {[&] { plain.run(A[0]->p, B[0]->p, D[0]->p); },
                                                  [&] { tuned.run(A[0]->p, B[0]->p, D[0]->p); },
                                                  [&] { epi[0]->run(A[0]->p, B[0]->p, D[0]->p); }};
      std::vector<std::string> names = {"cublaslt_gemm_only", "cublaslt_gemm_only_tuned",
                                        "cublaslt_relu_bias_epilogue"};
      int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N}, sd[2] = {M, N};
      const DLDevice dev{kDLCUDA, 0};
      DLTensor ta{A[0]->p, dev, 2, dt.dl, sa, nullptr, 0}, tb{B[0]->p, dev, 2, dt.dl, sb, nullptr, 0};
      DLTensor tbias{Bi[0]->p, dev, 1, dt.dl, sbias, nullptr, 0}, td{D[0]->p, dev, 2, dt.dl, sd, nullptr, 0};
      if (mf) {
        calls.push_back([&] {
          const DLTensor* in[3] = {&ta, &tb, &tbias};
          DLTensor* out[1] = {&td};
          if (dlfuse_op_call(mf, in, 3, out, 1, nullptr, 0, g_stream) != DLFUSE_STATUS_OK)
            die(std::string("dlfuse matmul_add_relu: ") + dlfuse_last_error());
        });
        names.push_back("dlfuse_cuda");
      }
      // About 0.2 s of calls per implementation (0.05 s quick), 30 to 200 calls.
      const double one = event_ms(calls[0], 3);
      const double budget = g_mode == Mode::full ? 0.2 : g_mode == Mode::quick ? 0.05 : 0.0;
      const int n = int(std::clamp(budget / std::max(one * 1e-3, 1e-7), g_mode == Mode::smoke ? 3.0 : 30.0, 200.0));
      const std::vector<Stats> f = time_flushed(calls, n);
      for (size_t i = 0; i < f.size(); ++i)
        row("matmul_add_relu", "fwd_flushed", dt.name, shape, names[i], "cuda:0", f[i], 1);
    }
  }
  if (reg) dlfuse_registry_destroy(reg);
  cublasLtDestroy(h);
  return 0;
}
