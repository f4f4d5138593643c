// Where the host time of a small CUDA-plugin call goes: each piece the plugin's GEMM path
// did or does per call, timed alone, next to the whole call through the C API; and the same
// for a bfloat16 4096x1024x1024 GEMM, whose call is bound by host time too.
//
//   cuda_host_cost PLUGIN_DIR_OR_FILE      (built and run by `tools/gpu.sh ab`)
//
// Host time per iteration (steady_clock over 2000 back-to-back iterations, median of 21
// rounds, a stream synchronize between rounds), so a number is the CPU cost of enqueueing,
// not GPU time: the small problems below take a few microseconds on the GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfuse/dlfuse.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

#define CK(x)                                                              \
  do {                                                                     \
    if (!(x)) {                                                            \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// kCalls per round by default; a GEMM that keeps the GPU busy longer than its call keeps the
// host takes fewer (64), so that the launch queue never fills and the loop times the host.
double median_ns(cudaStream_t s, const std::function<void()>& body, int kCalls = 2000) {
  constexpr int kRounds = 21;
  for (int i = 0; i < 200; ++i) body();
  CK(cudaStreamSynchronize(s) == cudaSuccess);
  std::vector<double> t;
  for (int r = 0; r < kRounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) body();
    const auto t1 = std::chrono::steady_clock::now();
    CK(cudaStreamSynchronize(s) == cudaSuccess);
    t.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kCalls);
  }
  std::sort(t.begin(), t.end());
  return t[kRounds / 2];
}

DLTensor tensor(void* data, int ndim, int64_t* shape, DLDataType dt = {kDLFloat, 32, 1}) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_DIR_OR_FILE\n", argv[0]);
    return 2;
  }
  cudaStream_t s;
  CK(cudaStreamCreate(&s) == cudaSuccess);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  const int64_t M = 32, N = 32, K = 32;
  void *a, *b, *bias, *d;
  CK(cudaMalloc(&a, 4 * M * K) == cudaSuccess && cudaMalloc(&b, 4 * K * N) == cudaSuccess);
  CK(cudaMalloc(&bias, 4 * 64) == cudaSuccess && cudaMalloc(&d, 4 * M * N) == cudaSuccess);
  CK(cudaMemset(a, 0, 4 * M * K) == cudaSuccess && cudaMemset(b, 0, 4 * K * N) == cudaSuccess);
  CK(cudaMemset(bias, 0, 4 * 64) == cudaSuccess);  // [N] for the GEMM, [64] for add_mul

  // The descriptor and four layouts a GEMM needs (what the plugin made on every call).
  struct Objs {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t l[4] = {};
  };
  auto make = [&](Objs& o) {
    const cublasOperation_t t = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
    const int64_t zero = 0;
    const int32_t one = 1;
    CK(cublasLtMatmulDescCreate(&o.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero, sizeof zero);
    for (auto& l : o.l) {
      CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 32, 32, 32) == CUBLAS_STATUS_SUCCESS);
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one, sizeof one);
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &zero, sizeof zero);
    }
  };
  auto destroy = [](Objs& o) {
    for (auto l : o.l) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(o.desc);
  };
  Objs kept;
  make(kept);
  // The algorithm the heuristic gives with `ws` bytes of workspace allowed, for epilogue `epi`.
  auto pick = [&](uint64_t ws, cublasLtEpilogue_t epi) {
    cublasLtMatmulDescSetAttribute(kept.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    const void* bp = epi == CUBLASLT_EPILOGUE_DEFAULT || epi == CUBLASLT_EPILOGUE_RELU ? nullptr : bias;
    cublasLtMatmulDescSetAttribute(kept.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, kept.desc, kept.l[0], kept.l[1], kept.l[2], kept.l[3], pref, 1, &r, &found) ==
           CUBLAS_STATUS_SUCCESS &&
       found == 1);
    cublasLtMatmulPreferenceDestroy(pref);
    return r;
  };
  const uint64_t wsz = 32u << 20;
  cudaMemPool_t pool;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CK(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  uint64_t keep = UINT64_MAX;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  void* ws = nullptr;
  CK(cudaMalloc(&ws, wsz) == cudaSuccess);

  std::printf("piece (float32 32x32x32 where a GEMM)                     ns per call, host\n");
  auto row = [&](const char* what, const std::function<void()>& f) { std::printf("%-58s %8.0f\n", what, median_ns(s, f)); };
  row("cuBLASLt desc + 4 layouts, made and destroyed", [&] {
    Objs o;
    make(o);
    destroy(o);
  });
  row("32 MiB workspace from a stream-ordered pool, and back", [&] {
    void* p = nullptr;
    cudaMallocFromPoolAsync(&p, wsz, pool, s);
    cudaFreeAsync(p, s);
  });
  row("set the bias pointer on a kept desc", [&] {
    cublasLtMatmulDescSetAttribute(kept.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  });
  const float one = 1.f, zero = 0.f;
  // Each variant: host time of the call, and how many graph nodes (kernels, memsets) one
  // call makes when captured.
  auto matmul_row = [&](const char* what, cublasLtEpilogue_t epi, uint64_t ws_allowed) {
    const cublasLtMatmulHeuristicResult_t r = pick(ws_allowed, epi);
    auto call = [&] {
      return cublasLtMatmul(lt, kept.desc, &one, a, kept.l[0], b, kept.l[1], &zero, d, kept.l[2], d, kept.l[3], &r.algo,
                            ws, r.workspaceSize, s);
    };
    if (call() != CUBLAS_STATUS_SUCCESS) {
      std::printf("cublasLtMatmul %s: refused (status %d)\n", what, int(call()));
      return;
    }
    cudaGraph_t g;
    size_t nodes = 0;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    call();
    CK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    cudaGraphGetNodes(g, nullptr, &nodes);
    cudaGraphDestroy(g);
    char label[160];
    std::snprintf(label, sizeof label, "cublasLtMatmul %s (ws %zu B, %zu nodes)", what, size_t(r.workspaceSize), nodes);
    row(label, call);
  };
  matmul_row("RELU_BIAS, 32 MiB allowed", CUBLASLT_EPILOGUE_RELU_BIAS, wsz);
  matmul_row("RELU_BIAS, none allowed", CUBLASLT_EPILOGUE_RELU_BIAS, 0);
  matmul_row("BIAS, 32 MiB allowed", CUBLASLT_EPILOGUE_BIAS, wsz);
  matmul_row("RELU, 32 MiB allowed", CUBLASLT_EPILOGUE_RELU, wsz);
  matmul_row("DEFAULT, 32 MiB allowed", CUBLASLT_EPILOGUE_DEFAULT, wsz);
  matmul_row("DEFAULT, none allowed", CUBLASLT_EPILOGUE_DEFAULT, 0);
  cublasHandle_t blas;
  CK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS && cublasSetStream(blas, s) == CUBLAS_STATUS_SUCCESS);
  CK(cublasSetWorkspace(blas, ws, wsz) == CUBLAS_STATUS_SUCCESS);
  CK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 32, 32, 32, &one, static_cast<float*>(a), 32, static_cast<float*>(b), 32,
                 &zero, static_cast<float*>(d), 32) == CUBLAS_STATUS_SUCCESS);
  row("cublasSgemm (cuBLAS, not Lt)", [&] {
    cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 32, 32, 32, &one, static_cast<float*>(a), 32, static_cast<float*>(b), 32,
                &zero, static_cast<float*>(d), 32);
  });
  row("cudaMemsetAsync of 4 KiB (one small launch)", [&] { cudaMemsetAsync(d, 0, 4 * M * N, s); });

  dlfuse_registry_options_t opt{};
  opt.struct_size = sizeof opt;
  opt.discovery = DLFUSE_DISCOVER_NONE;
  opt.plugin_paths = argv[1];
  dlfuse_registry_t reg = nullptr;
  if (dlfuse_registry_create(&opt, &reg) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "registry: %s\n", dlfuse_last_error());
    return 1;
  }
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N}, sd[2] = {M, N}, sx[2] = {64, 64}, sv[1] = {64};
  DLTensor ta = tensor(a, 2, sa), tb = tensor(b, 2, sb), tbias = tensor(bias, 1, sbias), td = tensor(d, 2, sd);
  DLTensor tx = tensor(ws, 2, sx), ty = tensor(static_cast<char*>(ws) + 65536, 2, sx), tv = tensor(bias, 1, sv);
  DLTensor to = tensor(static_cast<char*>(ws) + 2 * 65536, 2, sx);
  CK(dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &td, 0, s) == DLFUSE_STATUS_OK);
  row("dlfuse_matmul_add_relu 32x32x32 (the plugin's whole call)",
      [&] { dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &td, 0, s); });
  row("dlfuse_add_mul_activation 64x64 relu (one kernel)",
      [&] { dlfuse_add_mul_activation(reg, &tx, &ty, &tv, 0.5, DLFUSE_ACT_RELU, &to, s); });

  // A GEMM large enough for cuBLASLt's kernels but GPU-short (about 15 us on the H100): the
  // bfloat16 4096x1024x1024 GELU line of issue 17, where a call's time is its host time.
  const int64_t BM = 4096, BK = 1024, BN = 1024;
  void *ba, *bb, *bbias, *bd;
  CK(cudaMalloc(&ba, 2 * BM * BK) == cudaSuccess && cudaMalloc(&bb, 2 * BK * BN) == cudaSuccess);
  CK(cudaMalloc(&bbias, 2 * BN) == cudaSuccess && cudaMalloc(&bd, 2 * BM * BN) == cudaSuccess);
  CK(cudaMemset(ba, 0, 2 * BM * BK) == cudaSuccess && cudaMemset(bb, 0, 2 * BK * BN) == cudaSuccess);
  CK(cudaMemset(bbias, 0, 2 * BN) == cudaSuccess);
  std::printf("bfloat16 4096x1024x1024 (64 calls a round)\n");
  for (const cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_BIAS}) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    const cublasOperation_t t = CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (epi != CUBLASLT_EPILOGUE_DEFAULT)
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bbias, sizeof bbias);
    // Column-major D (BN x BM) = A (BN x BK) B (BK x BM): dlfuse's row-major problem.
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, BN, BK, BN) == CUBLAS_STATUS_SUCCESS);
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, BK, BM, BK) == CUBLAS_STATUS_SUCCESS);
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, BN, BM, BN) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &r, &found) == CUBLAS_STATUS_SUCCESS &&
       found == 1);
    char label[160];
    std::snprintf(label, sizeof label, "cublasLtMatmul %s, kept desc and algorithm",
                  epi == CUBLASLT_EPILOGUE_DEFAULT ? "DEFAULT" : "GELU_BIAS");
    std::printf("%-58s %8.0f\n", label, median_ns(s, [&] {
                  cublasLtMatmul(lt, desc, &one, bb, la, ba, lb, &zero, bd, ld, bd, ld, &r.algo, ws,
                                 r.workspaceSize, s);
                }, 64));
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
  }
  const DLDataType bf16{kDLBfloat, 16, 1};
  int64_t bsa[2] = {BM, BK}, bsb[2] = {BK, BN}, bsbias[1] = {BN}, bsd[2] = {BM, BN};
  DLTensor xa = tensor(ba, 2, bsa, bf16), xb = tensor(bb, 2, bsb, bf16), xbias = tensor(bbias, 1, bsbias, bf16);
  DLTensor xd = tensor(bd, 2, bsd, bf16);
  CK(dlfuse_matmul_add_activation(reg, &xa, &xb, &xbias, DLFUSE_ACT_GELU_TANH, &xd, nullptr, 0, s) ==
     DLFUSE_STATUS_OK);
  std::printf("%-58s %8.0f\n", "dlfuse_matmul_add_activation gelu_tanh (the whole call)", median_ns(s, [&] {
                dlfuse_matmul_add_activation(reg, &xa, &xb, &xbias, DLFUSE_ACT_GELU_TANH, &xd, nullptr, 0, s);
              }, 64));
  std::printf("%-58s %8.0f\n", "dlfuse_matmul_add_relu (the whole call)", median_ns(s, [&] {
                dlfuse_matmul_add_relu(reg, &xa, &xb, &xbias, &xd, 0, s);
              }, 64));
  for (void* p : {ba, bb, bbias, bd}) cudaFree(p);

  const int st = dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &td, 0, s);
  dlfuse_registry_destroy(reg);
  return st == DLFUSE_STATUS_OK ? 0 : 1;
}
