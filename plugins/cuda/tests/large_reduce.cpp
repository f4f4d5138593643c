// Large reductions through the C API on cuda:0, with exact answers:
// - into a scalar gradient over 2^25 elements (a float accumulator stops growing at 2^24
//   equal terms; every gradient must be exactly M*N);
// - the flat add_mul backward (2^26 elements or more), whose blocks sum up a tree and leave
//   their counters zero for the next call: three calls in a row on one stream, then a CUDA
//   graph of one call (counters in the call's workspace there) replayed twice, each with a
//   new grad_out; a row bias (8193 rows: partly filled nodes) and a scalar one.
// Exit 77 (ctest: skipped) without a usable CUDA device.
#include <cuda_runtime.h>
#include <dlfuse/dlfuse.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int64_t M = 8192, N = 4096;
constexpr int kSkip = 77;

struct Dev {
  dlfuse_registry_t reg;
  DLDevice dev{kDLCUDA, 0};
  std::vector<void*> owned;
  DLTensor put(const std::vector<float>& v, int ndim, int64_t* shape) {
    void* p = nullptr;
    if (dlfuse_device_alloc(reg, dev, v.size() * sizeof(float), &p) != DLFUSE_STATUS_OK ||
        dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, p, 0, v.data(), 0, v.size() * sizeof(float),
                           nullptr) != DLFUSE_STATUS_OK) {
      std::printf("device setup: %s\n", dlfuse_last_error());
      std::exit(1);
    }
    owned.push_back(p);
    DLTensor t{};
    t.data = p;
    t.device = dev;
    t.ndim = ndim;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    return t;
  }
  float get(const DLTensor& t) {
    float v = -1.f;
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, &v, 0, t.data, 0, sizeof v, nullptr);
    return v;
  }
  std::vector<float> get_all(const DLTensor& t, size_t n) {
    std::vector<float> v(n, -1.f);
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, v.data(), 0, t.data, 0, n * sizeof(float), nullptr);
    return v;
  }
  void fill(const DLTensor& t, const std::vector<float>& v) {
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, t.data, 0, v.data(), 0, v.size() * sizeof(float), nullptr);
  }
};

// grad_out of call k: small integers that change with the row, the column and the call (each
// column sum is exact in float, and a call that reads a stale or wrong row gets another);
// with a scalar bias the constant k, whose total over 2^26 elements stays exact too.
float pattern(int k, int64_t r, int64_t c, bool scalar) {
  return scalar ? float(k) : float(k + (r * 7 + c * 3 + k) % 5);
}

// Call k of the flat backward from out (identity): grad_x must equal grad_out and grad_bias
// its exact column sums (or total). `run` enqueues the call on s.
int check_flat(Dev& d, const std::string& label, int k, const std::function<bool()>& run, cudaStream_t s,
               const DLTensor& g, const DLTensor& gx, const DLTensor& gb, int64_t M, int64_t N, bool scalar) {
  const size_t n = size_t(M * N), nb = scalar ? 1 : size_t(N);
  std::vector<float> gv(n);
  std::vector<double> want(nb, 0.0);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      const float v = pattern(k, r, c, scalar);
      gv[size_t(r * N + c)] = v;
      want[scalar ? 0 : size_t(c)] += v;
    }
  d.fill(g, gv);
  d.fill(gx, std::vector<float>(n, -5.f));
  d.fill(gb, std::vector<float>(nb, -5.f));
  if (!run() || cudaStreamSynchronize(s) != cudaSuccess) {
    std::printf("%s: failed: %s\n", label.c_str(), dlfuse_last_error());
    return 1;
  }
  const std::vector<float> x = d.get_all(gx, n), b = d.get_all(gb, nb);
  size_t bad_x = 0, bad_b = 0, first = nb;
  for (size_t i = 0; i < n; ++i) bad_x += x[i] != gv[i];
  for (size_t i = 0; i < nb; ++i)
    if (double(b[i]) != want[i]) bad_b += 1, first = first < nb ? first : i;
  std::printf("%s: grad_bias %zu of %zu wrong%s, grad_x %zu of %zu wrong\n", label.c_str(), bad_b, nb,
              first < nb ? (" (first at " + std::to_string(first) + ": " + std::to_string(b[first]) + ", expected " +
                            std::to_string(want[first]) + ")")
                               .c_str()
                         : "",
              bad_x, n);
  return bad_x || bad_b ? 1 : 0;
}

// Three calls on one stream, then a graph of one call replayed twice, each with new grad_out.
int flat_cases(Dev& d, int64_t M, int64_t N, bool scalar_bias) {
  int64_t so[2] = {M, N}, sb[1] = {scalar_bias ? 1 : N};
  const size_t n = size_t(M * N), nb = size_t(sb[0]);
  DLTensor g = d.put(std::vector<float>(n, 0.f), 2, so), out = d.put(std::vector<float>(n, 0.5f), 2, so);
  DLTensor gx = d.put(std::vector<float>(n, 0.f), 2, so), gb = d.put(std::vector<float>(nb, 0.f), 1, sb);
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
  auto call = [&] {
    return dlfuse_add_mul_activation_backward_from_out(d.reg, &g, &out, 1.0, DLFUSE_ACT_IDENTITY, &gx, nullptr, &gb,
                                                       s) == DLFUSE_STATUS_OK;
  };
  const std::string shape =
      "flat " + std::to_string(M) + "x" + std::to_string(N) + (scalar_bias ? " bias[1]" : " bias[N]");
  int bad = 0, k = 0;
  for (int i = 1; i <= 3; ++i)
    bad += check_flat(d, shape + " call " + std::to_string(i), ++k, call, s, g, gx, gb, M, N, scalar_bias);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = false;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    captured = call();
    captured = cudaStreamEndCapture(s, &graph) == cudaSuccess && captured;
  }
  if (!captured || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    std::printf("%s: capture failed: %s\n", shape.c_str(), dlfuse_last_error());
    return 1;
  }
  auto replay = [&] { return cudaGraphLaunch(exec, s) == cudaSuccess; };
  for (int i = 1; i <= 2; ++i)
    bad += check_flat(d, shape + " graph replay " + std::to_string(i), ++k, replay, s, g, gx, gb, M, N, scalar_bias);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s libdlfuse_cuda.so\n", argv[0]);
    return 2;
  }
  dlfuse_registry_options_t o{sizeof o, DLFUSE_DISCOVER_NONE, argv[1]};
  Dev d{};
  if (dlfuse_registry_create(&o, &d.reg) != DLFUSE_STATUS_OK) return 1;
  int32_t count = 0;
  if (dlfuse_device_count(d.reg, kDLCUDA, &count) != DLFUSE_STATUS_OK || count < 1) {
    std::printf("skipped: no usable CUDA device\n");
    return kSkip;
  }
  int64_t so[2] = {M, N}, sa[2] = {M, 1}, sb[2] = {1, N}, s1[1] = {1};
  const std::vector<float> ones(size_t(M * N), 1.f), a(size_t(M), 1.f), b(size_t(N), 1.f), z(1, -5.f), zero(1, 0.f);
  DLTensor g = d.put(ones, 2, so), out = d.put(ones, 2, so), ta = d.put(a, 2, sa), tb = d.put(b, 2, sb);
  DLTensor gb = d.put(z, 1, s1), gb2 = d.put(z, 1, s1), bias = d.put(zero, 1, s1);
  int bad = 0;
  // matmul backward, bias [1]: grad_bias = sum of dZ = M*N.
  if (dlfuse_matmul_add_relu_backward(d.reg, &g, &ta, &tb, &out, nullptr, nullptr, &gb, 0, nullptr) !=
      DLFUSE_STATUS_OK) {
    std::printf("matmul backward: %s\n", dlfuse_last_error());
    return 1;
  }
  // add_mul backward, identity, bias [1]: grad_bias = sum of grad_out = M*N.
  if (dlfuse_add_mul_activation_backward(d.reg, &g, &out, &out, &bias, 0.5, DLFUSE_ACT_IDENTITY, nullptr, nullptr, &gb2,
                                         nullptr) != DLFUSE_STATUS_OK) {
    std::printf("add_mul backward: %s\n", dlfuse_last_error());
    return 1;
  }
  dlfuse_device_synchronize(d.reg, d.dev, nullptr);
  const double want = double(M) * double(N);
  const float got1 = d.get(gb), got2 = d.get(gb2);
  std::printf("matmul grad_bias[1] = %.1f, add_mul grad_bias[1] = %.1f (expected %.1f)\n", got1, got2, want);
  bad += got1 != want;
  bad += got2 != want;
  bad += flat_cases(d, 8193, 8192, false);  // 1025 block rows: nodes of 16, 16, ..., 1
  bad += flat_cases(d, 8192, 8192, true);   // the scalar: exact, every partial a multiple of 8192
  for (void* p : d.owned) dlfuse_device_free(d.reg, d.dev, p);
  dlfuse_registry_destroy(d.reg);
  return bad ? 1 : 0;
}
