// Every cuBLASLt candidate of one row-major GEMM problem, timed as GPU time per call by CUDA
// graph replay (no host cost, no launch gaps beyond the graph's own): which algorithm a
// GEMM with an epilogue could take, and what its workspace costs (a workspace adds a memset
// node). Optionally the CUDA plugin's own call on the same operands, captured the same way.
// Two columns: "warm", every call on one set of operands (L2-resident where they fit, as in
// the plugin's autotune), and "cold", calls rotating over sets of at least 128 MiB in all,
// as bench/run.py's rows do.
//
//   dlfuse_lt_candidates DTYPE M K N EPI [libdlfuse_cuda.so]
//     DTYPE float32|bfloat16; EPI default|bias|gelu_bias|residual (bias + beta=1 C), or the plugin's
//     relu_plugin|gelu_plugin|residual_plugin
//
// A research tool (docs/performance.md cites its output; `tools/gpu.sh lt-candidates` runs
// those rows, with bench/cuda/lt_candidates_torch.py for PyTorch's); bench/run.py is the bench.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfuse/dlfuse.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    if (!(x)) {                                                                      \
      std::fprintf(stderr, "failed: %s (line %d): %s\n", #x, __LINE__,               \
                   cudaGetErrorString(cudaGetLastError()));                          \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

constexpr int kCallsPerGraph = 20;
constexpr int kReplays = 31;
constexpr size_t kWs = 32u << 20;

__global__ void fill(unsigned short* p, size_t n, bool bf16, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float v = float(int(x & 0xffff) - 32768) / 32768.f;
    if (bf16) {
      unsigned u;
      std::memcpy(&u, &v, 4);
      p[i] = static_cast<unsigned short>(u >> 16);
    } else {
      reinterpret_cast<float*>(p)[i] = v;
    }
  }
}

void* buffer(size_t elems, int es, bool bf16, unsigned seed) {
  void* p = nullptr;
  CK(cudaMalloc(&p, elems * size_t(es)) == cudaSuccess);
  fill<<<1024, 256>>>(static_cast<unsigned short*>(p), elems, bf16, seed);
  CK(cudaDeviceSynchronize() == cudaSuccess);
  return p;
}

// Median GPU time per call (us) of `call`, captured kCallsPerGraph times into one graph.
template <class F> float graph_time(cudaStream_t s, F call, size_t* nodes_per_call) {
  cudaGraph_t one;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  call(0);
  CK(cudaStreamEndCapture(s, &one) == cudaSuccess);
  CK(cudaGraphGetNodes(one, nullptr, nodes_per_call) == cudaSuccess);
  cudaGraphDestroy(one);
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  for (int i = 0; i < kCallsPerGraph; ++i) call(i);
  CK(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess);
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s) == cudaSuccess);
  std::vector<float> t;
  for (int r = 0; r < kReplays; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b) == cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1000.f / kCallsPerGraph);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  int v = -1;
  size_t w = 0;
  uint32_t u = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &u, sizeof u, &w) == CUBLAS_STATUS_SUCCESS) v = int(u);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s DTYPE M K N EPI [libdlfuse_cuda.so]\n", argv[0]);
    return 2;
  }
  const bool bf16 = std::string(argv[1]) == "bfloat16";
  const int64_t M = std::atoll(argv[2]), K = std::atoll(argv[3]), N = std::atoll(argv[4]);
  const std::string epi_name = argv[5];
  const int es = bf16 ? 2 : 4;
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  const size_t set_bytes = size_t(M * K + K * N + 2 * M * N + N) * size_t(es);
  const int sets = int(std::max<size_t>(1, ((128u << 20) + set_bytes - 1) / set_bytes));
  std::vector<void*> A, B, Bias, C, D;
  for (int i = 0; i < sets; ++i) {
    A.push_back(buffer(size_t(M * K), es, bf16, 1 + 5 * i));
    B.push_back(buffer(size_t(K * N), es, bf16, 2 + 5 * i));
    Bias.push_back(buffer(size_t(N), es, bf16, 3 + 5 * i));
    C.push_back(buffer(size_t(M * N), es, bf16, 4 + 5 * i));
    D.push_back(buffer(size_t(M * N), es, bf16, 5 + 5 * i));
  }
  // call(k) uses set k % n: n = 1 warm, n = sets cold.
  int n_sets = 1;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, kWs) == cudaSuccess);
  std::printf("%s %lldx%lldx%lld %s\n", argv[1], (long long)M, (long long)K, (long long)N, epi_name.c_str());

  if (epi_name == "gelu_plugin" || epi_name == "relu_plugin" || epi_name == "residual_plugin") {
    if (argc < 7) return 2;
    dlfuse_registry_options_t opt{};
    opt.struct_size = sizeof opt;
    opt.discovery = DLFUSE_DISCOVER_NONE;
    opt.plugin_paths = argv[6];
    dlfuse_registry_t reg = nullptr;
    CK(dlfuse_registry_create(&opt, &reg) == DLFUSE_STATUS_OK);
    const DLDataType dt = bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N}, sd[2] = {M, N};
    auto tensor = [&](void* p, int nd, int64_t* shape) {
      DLTensor x{};
      x.data = p;
      x.device = {kDLCUDA, 0};
      x.ndim = nd;
      x.dtype = dt;
      x.shape = shape;
      return x;
    };
    std::vector<DLTensor> ta, tb, tbias, td, tc;
    for (int i = 0; i < sets; ++i) {
      tc.push_back(tensor(C[size_t(i)], 2, sd));
      ta.push_back(tensor(A[size_t(i)], 2, sa));
      tb.push_back(tensor(B[size_t(i)], 2, sb));
      tbias.push_back(tensor(Bias[size_t(i)], 1, sbias));
      td.push_back(tensor(D[size_t(i)], 2, sd));
    }
    const std::string what = epi_name.substr(0, epi_name.size() - 7);
    auto call = [&](int k) {
      const size_t j = size_t(k % n_sets);
      if (what == "gelu")
        return dlfuse_matmul_add_activation(reg, &ta[j], &tb[j], &tbias[j], DLFUSE_ACT_GELU_TANH, &td[j], nullptr, 0, s);
      if (what == "residual") return dlfuse_matmul_add_residual(reg, &ta[j], &tb[j], &tbias[j], &tc[j], &td[j], 0, s);
      return dlfuse_matmul_add_relu(reg, &ta[j], &tb[j], &tbias[j], &td[j], 0, s);
    };
    CK(call(0) == DLFUSE_STATUS_OK);  // algorithm chosen (and tuned) outside the capture
    CK(cudaStreamSynchronize(s) == cudaSuccess);
    size_t nodes = 0;
    const float warm = graph_time(s, call, &nodes);
    n_sets = sets;
    const float cold = graph_time(s, call, &nodes);
    std::printf("plugin %s: warm %.2f us, cold %.2f us per call (%d sets), %zu graph nodes per call\n", what.c_str(),
                warm, cold, sets, nodes);
    dlfuse_registry_destroy(reg);
    return 0;
  }

  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (epi_name == "bias" || epi_name == "residual") epi = CUBLASLT_EPILOGUE_BIAS;
  if (epi_name == "gelu_bias") epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  const float beta = epi_name == "residual" ? 1.f : 0.f;
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  // Column-major D (N x M) = B^T-as-stored (N x K) x A (K x M): the row-major problem.
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, t, N, K, N) == CUBLAS_STATUS_SUCCESS);
  CK(cublasLtMatrixLayoutCreate(&lb, t, K, M, K) == CUBLAS_STATUS_SUCCESS);
  CK(cublasLtMatrixLayoutCreate(&ld, t, N, M, N) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  const uint64_t wsz = kWs;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
  cublasLtMatmulHeuristicResult_t r[16];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 16, r, &found) == CUBLAS_STATUS_SUCCESS);
  const float one = 1.f;
  std::printf("%3s %9s %6s %5s %5s %5s %5s %9s %9s (%d sets)\n", "#", "ws_bytes", "nodes", "tile", "stage", "split",
              "clust", "warm_us", "cold_us", sets);
  for (int i = 0; i < found; ++i) {
    auto call = [&](int k) {
      const size_t j = size_t(k % n_sets);
      if (epi != CUBLASLT_EPILOGUE_DEFAULT)
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &Bias[j], sizeof Bias[j]);
      return cublasLtMatmul(lt, desc, &one, B[j], la, A[j], lb, &beta, C[j], ld, D[j], ld, &r[i].algo, ws,
                            r[i].workspaceSize, s);
    };
    n_sets = 1;
    if (call(0) != CUBLAS_STATUS_SUCCESS) {
      std::printf("%3d refused\n", i);
      continue;
    }
    size_t nodes = 0;
    const float warm = graph_time(s, call, &nodes);
    n_sets = sets;
    const float cold = graph_time(s, call, &nodes);
    std::printf("%3d %9zu %6zu %5d %5d %5d %5d %9.2f %9.2f\n", i, size_t(r[i].workspaceSize), nodes,
                attr(r[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID), attr(r[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                attr(r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), attr(r[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                warm, cold);
  }
  return 0;
}
