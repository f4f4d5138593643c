// CUDA faults through the C API: out-of-memory and invalid device ids must give clean
// statuses with messages, the plugin must keep working afterwards, and nothing may leak.
// Usage: dlfuse_cuda_faults <libdlfuse_cuda.so> [--no-exhaust]
//   --no-exhaust  skip filling the GPU's memory (for runs under compute-sanitizer)
// Exit 77 (ctest: skipped) without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <dlfuse/dlfuse.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSkip = 77;
int g_failures = 0;

#define EXPECT(cond, ...)                              \
  do {                                                 \
    if (!(cond)) {                                     \
      ++g_failures;                                    \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                        \
      std::printf("\n");                               \
    }                                                  \
  } while (0)

std::string last() { return dlfuse_last_error(); }
bool has(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }

size_t free_bytes() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

// A status other than OK, with a message that names `needle`.
void expect_refused(dlfuse_status_t s, const char* what, const std::string& needle) {
  const std::string m = last();
  EXPECT(s != DLFUSE_STATUS_OK, "%s succeeded", what);
  EXPECT(!m.empty() && has(m, needle), "%s: message lacks '%s': %s", what, needle.c_str(), m.c_str());
  std::printf("  %-44s -> %s: %s\n", what, dlfuse_status_string(s), m.c_str());
}

struct Dev {
  dlfuse_registry_t reg = nullptr;
  DLDevice dev{kDLCUDA, 0};
  std::vector<void*> owned;
  DLTensor put(const std::vector<float>& v, int ndim, int64_t* shape) {
    void* p = nullptr;
    DLTensor t{};
    if (dlfuse_device_alloc(reg, dev, v.size() * sizeof(float), &p) != DLFUSE_STATUS_OK ||
        dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, p, 0, v.data(), 0, v.size() * sizeof(float),
                           nullptr) != DLFUSE_STATUS_OK) {
      EXPECT(false, "device setup: %s", last().c_str());
      return t;
    }
    owned.push_back(p);
    t.data = p;
    t.device = dev;
    t.ndim = ndim;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    return t;
  }
  float get(const DLTensor& t, size_t i) {
    float v = -1.f;
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, &v, 0, t.data, i * sizeof(float), sizeof v, nullptr);
    return v;
  }
  void release() {
    for (void* p : owned) dlfuse_device_free(reg, dev, p);
    owned.clear();
  }
};

// A batched backward whose grad_b is reduced over a broadcast batch: the plugin needs a
// temporary of B*K*N floats from its pool, and cuBLASLt a workspace.
constexpr int64_t B = 64, M = 256, K = 256, N = 256;
struct Backward {
  int64_t sa[3] = {B, M, K}, sb[2] = {K, N}, so[3] = {B, M, N}, sbias[1] = {N};
  DLTensor a, b, g, out, ga, gb, gbias;
  void make(Dev& d) {
    const std::vector<float> ones_a(size_t(B * M * K), 1.f), ones_b(size_t(K * N), 1.f), ones_o(size_t(B * M * N), 1.f),
        zn(size_t(N), 0.f);
    a = d.put(ones_a, 3, sa);
    b = d.put(ones_b, 2, sb);
    g = d.put(ones_o, 3, so);
    out = d.put(ones_o, 3, so);
    ga = d.put(ones_a, 3, sa);
    gb = d.put(ones_b, 2, sb);
    gbias = d.put(zn, 1, sbias);
  }
  dlfuse_status_t run(Dev& d) {
    return dlfuse_matmul_add_relu_backward(d.reg, &g, &a, &b, &out, &ga, &gb, &gbias, 0, nullptr);
  }
  // Every input is 1 and out > 0: grad_a = N, grad_b = B*M, grad_bias = B*M, all exact.
  bool correct(Dev& d) {
    dlfuse_device_synchronize(d.reg, d.dev, nullptr);
    const float x = d.get(ga, 12345), y = d.get(gb, 777), z = d.get(gbias, 3);
    const bool ok = x == float(N) && y == float(B * M) && z == float(B * M);
    if (!ok)
      std::printf("  grad_a %.1f (want %lld), grad_b %.1f, grad_bias %.1f (want %lld)\n", x, (long long)N, y, z,
                  (long long)(B * M));
    return ok;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libdlfuse_cuda.so [--no-exhaust]\n", argv[0]);
    return 2;
  }
  const bool exhaust = !(argc > 2 && std::strcmp(argv[2], "--no-exhaust") == 0);
  dlfuse_registry_options_t o{sizeof o, DLFUSE_DISCOVER_NONE, argv[1]};
  Dev d;
  if (dlfuse_registry_create(&o, &d.reg) != DLFUSE_STATUS_OK) return 1;
  int32_t count = 0;
  if (dlfuse_device_count(d.reg, kDLCUDA, &count) != DLFUSE_STATUS_OK || count < 1) {
    dlfuse_plugin_info_t info{};
    info.struct_size = sizeof info;
    const bool listed = dlfuse_registry_plugin_info(d.reg, 0, &info) == DLFUSE_STATUS_OK && info.reason;
    std::printf("skipped: no usable CUDA device (%s)\n", listed ? info.reason : last().c_str());
    dlfuse_registry_destroy(d.reg);
    return kSkip;
  }
  std::printf("%d CUDA device(s)\n", count);

  // Warm up: the kernels' modules, cuBLASLt, the pool, so the leak check compares like with like.
  Backward bw;
  bw.make(d);
  EXPECT(bw.run(d) == DLFUSE_STATUS_OK, "warm-up backward: %s", last().c_str());
  EXPECT(bw.correct(d), "warm-up backward is wrong");
  d.release();
  dlfuse_device_synchronize(d.reg, d.dev, nullptr);
  const size_t free0 = free_bytes();
  std::printf("free after warm-up: %.1f MiB\n", free0 / 1048576.0);

  std::printf("out of memory:\n");
  void* p = nullptr;
  expect_refused(dlfuse_device_alloc(d.reg, d.dev, size_t(1) << 50, &p), "alloc 1 PiB", "cudaMalloc");
  EXPECT(dlfuse_device_alloc(d.reg, d.dev, size_t(1) << 50, &p) == DLFUSE_STATUS_OUT_OF_MEMORY,
         "alloc 1 PiB is not OUT_OF_MEMORY");
  expect_refused(dlfuse_device_alloc(d.reg, d.dev, SIZE_MAX, &p), "alloc SIZE_MAX bytes", "cuda");

  {
    // A failed allocation leaves nothing behind that the next kernel would trip on.
    std::vector<float> v(16, 0.5f);
    int64_t s[2] = {4, 4};
    DLTensor x = d.put(v, 2, s), y = d.put(v, 2, s), bias = d.put(v, 2, s), out = d.put(v, 2, s);
    EXPECT(dlfuse_add_mul_activation(d.reg, &x, &y, &bias, 1.0, DLFUSE_ACT_IDENTITY, &out, nullptr) == DLFUSE_STATUS_OK,
           "a kernel right after a failed allocation: %s", last().c_str());
    dlfuse_device_synchronize(d.reg, d.dev, nullptr);
    EXPECT(d.get(out, 5) == 1.5f, "a kernel right after a failed allocation gave %f", d.get(out, 5));
    d.release();
  }

  std::printf("invalid device ids:\n");
  for (int id : {99, count, -1}) {
    const DLDevice bad{kDLCUDA, id};
    const std::string n = std::to_string(id);
    expect_refused(dlfuse_device_alloc(d.reg, bad, 1024, &p), ("alloc on cuda:" + n).c_str(), n);
    expect_refused(dlfuse_device_synchronize(d.reg, bad, nullptr), ("synchronize on cuda:" + n).c_str(), n);
    float h = 0;
    expect_refused(dlfuse_device_copy(d.reg, bad, DLFUSE_COPY_HOST_TO_DEVICE, &h, 0, &h, 0, 4, nullptr),
                   ("copy on cuda:" + n).c_str(), n);
    // (free of NULL is OK on any device, like free(NULL); a real pointer is checked)
    int dummy = 0;
    expect_refused(dlfuse_device_free(d.reg, bad, &dummy), ("free on cuda:" + n).c_str(), n);
  }
  {
    // Tensors that claim cuda:99 (their memory is real, on device 0): refused before any launch.
    std::vector<float> v(16, 1.f);
    int64_t s[2] = {4, 4}, sn[1] = {4};
    DLTensor x = d.put(v, 2, s), y = d.put(v, 2, s), bias = d.put(v, 1, sn), out = d.put(v, 2, s);
    for (DLTensor* t : {&x, &y, &bias, &out}) t->device.device_id = 99;
    expect_refused(dlfuse_add_mul_activation(d.reg, &x, &y, &bias, 1.0, DLFUSE_ACT_RELU, &out, nullptr),
                   "add_mul_activation on cuda:99", "cuda:99");
    expect_refused(dlfuse_matmul_add_relu(d.reg, &x, &y, &bias, &out, 0, nullptr), "matmul_add_relu on cuda:99",
                   "cuda:99");
    out.device.device_id = 0;  // mixed devices
    expect_refused(dlfuse_add_mul_activation(d.reg, &x, &y, &bias, 1.0, DLFUSE_ACT_RELU, &out, nullptr),
                   "add_mul_activation on cuda:99 and cuda:0", "device");
    d.release();
  }

  if (exhaust) {
    std::printf("memory exhausted:\n");
    bw.make(d);
    std::vector<void*> hog;
    size_t held = 0;
    for (size_t chunk : {size_t(1) << 30, size_t(1) << 26, size_t(1) << 22}) {
      for (;;) {
        void* q = nullptr;
        const dlfuse_status_t s = dlfuse_device_alloc(d.reg, d.dev, chunk, &q);
        if (s != DLFUSE_STATUS_OK) {
          EXPECT(s == DLFUSE_STATUS_OUT_OF_MEMORY, "filling: %s: %s", dlfuse_status_string(s), last().c_str());
          break;
        }
        hog.push_back(q);
        held += chunk;
      }
    }
    std::printf("  held %.1f GiB in %zu allocations; free now %.1f MiB\n", held / 1073741824.0, hog.size(),
                free_bytes() / 1048576.0);
    // The pool may still hold the warm-up's temporaries: the call may succeed. Either way a
    // clean status, and a message when it fails.
    for (int rep = 0; rep < 3; ++rep) {
      const dlfuse_status_t s = bw.run(d);
      const dlfuse_status_t sync = dlfuse_device_synchronize(d.reg, d.dev, nullptr);
      std::printf("  backward with the GPU full -> %s%s%s; synchronize -> %s\n", dlfuse_status_string(s), s ? ": " : "",
                  s ? last().c_str() : "", dlfuse_status_string(sync));
      EXPECT(s == DLFUSE_STATUS_OK || s == DLFUSE_STATUS_OUT_OF_MEMORY,
             "backward with the GPU full: %s (expected OK or OUT_OF_MEMORY): %s", dlfuse_status_string(s),
             last().c_str());
      if (s != DLFUSE_STATUS_OK) EXPECT(!last().empty(), "failure without a message");
      if (s == DLFUSE_STATUS_OK) EXPECT(bw.correct(d), "backward with the GPU full gave wrong results");
      EXPECT(sync == DLFUSE_STATUS_OK, "synchronize after a failed call: %s", last().c_str());
    }
    for (void* q : hog) EXPECT(dlfuse_device_free(d.reg, d.dev, q) == DLFUSE_STATUS_OK, "free: %s", last().c_str());
    hog.clear();
    std::printf("  released; free now %.1f MiB\n", free_bytes() / 1048576.0);
    // Working again, with correct results.
    EXPECT(bw.run(d) == DLFUSE_STATUS_OK, "backward after release: %s", last().c_str());
    EXPECT(bw.correct(d), "backward after release gave wrong results");
    d.release();
  }

  dlfuse_device_synchronize(d.reg, d.dev, nullptr);
  const size_t free1 = free_bytes();
  dlfuse_registry_destroy(d.reg);
  const size_t free2 = free_bytes();
  std::printf("free: after warm-up %.1f MiB, at the end %.1f MiB, after destroy %.1f MiB\n", free0 / 1048576.0,
              free1 / 1048576.0, free2 / 1048576.0);
  // Nothing of ours is held after destroy (cuBLASLt and the pool are gone too), so free
  // memory is at least what it was after the warm-up, within 16 MiB of driver slack.
  EXPECT(free2 + (size_t(16) << 20) >= free0, "leak: %.1f MiB less free after destroy than after warm-up",
         (double(free0) - double(free2)) / 1048576.0);
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
