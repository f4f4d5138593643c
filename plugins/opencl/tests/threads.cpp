// Concurrency test of the OpenCL plugin through the host API: several threads start at
// once (so the first calls race on the per-device program build), each with its own
// buffers; even threads use the default queue (stream NULL), odd threads their own
// cl_command_queue of the plugin's context (a stream). Every result is checked on the host.
//   opencl_threads PLUGIN.so [threads] [iterations]
//
// PoCL 3.1 keeps one process-wide table of loaded kernel binaries and can abort
// (pocl_release_dlhandle_cache: `found->ref_count > 0`) when its worker threads load the
// same kernel at once: measured 1 abort in 53 runs under TSan with a warm on-disk cache.
// So every thread's calls run once, one thread after another, in a registry of their own
// first: that fills PoCL's table, and the threaded registry still races on its own
// first use (the plugin's per-device program build), which is what this test is for.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfuse/dlfuse.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<int> g_fail{0};

void report(int tid, const std::string& what) {
  std::fprintf(stderr, "thread %d: %s\n", tid, what.c_str());
  g_fail.fetch_add(1);
}

bool ok(int tid, dlfuse_status_t st, const char* what) {
  if (st == DLFUSE_STATUS_OK) return true;
  report(tid, std::string(what) + ": " + dlfuse_status_string(st) + ": " + dlfuse_last_error());
  return false;
}

void worker(dlfuse_registry_t reg, int tid, int iters, std::atomic<int>* gate) {
  const DLDevice dev{kDLOpenCL, 0};
  const int64_t M = 33 + tid, K = 17, N = 29;
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N)),
      out(static_cast<size_t>(M * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float((int(i) * 7 + tid) % 13 - 6) / 8.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float((int(i) * 5 + 3) % 11 - 5) / 4.0f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(int(i) % 7 - 3) / 2.0f;
  void *da = nullptr, *db = nullptr, *dbias = nullptr, *dout = nullptr, *damx = nullptr;
  cl_command_queue own = nullptr;
  void* stream = nullptr;
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N}, so[2] = {M, N};
  DLTensor ta{}, tb{}, tbias{}, tout{}, tamx{};
  // Setup, then every thread waits at the gate, also one whose setup failed.
  const bool ready = [&] {
    if (!ok(tid, dlfuse_device_alloc(reg, dev, a.size() * 4, &da), "alloc") ||
        !ok(tid, dlfuse_device_alloc(reg, dev, b.size() * 4, &db), "alloc") ||
        !ok(tid, dlfuse_device_alloc(reg, dev, bias.size() * 4, &dbias), "alloc") ||
        !ok(tid, dlfuse_device_alloc(reg, dev, out.size() * 4, &dout), "alloc") ||
        !ok(tid, dlfuse_device_alloc(reg, dev, out.size() * 4, &damx), "alloc"))
      return false;
    if (tid % 2) {  // a queue of the plugin's context, found through one of its buffers
      cl_context ctx = nullptr;
      cl_device_id did = nullptr;
      clGetMemObjectInfo(static_cast<cl_mem>(da), CL_MEM_CONTEXT, sizeof ctx, &ctx, nullptr);
      clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof did, &did, nullptr);
      cl_int rc = CL_SUCCESS;
      own = clCreateCommandQueue(ctx, did, 0, &rc);
      if (rc != CL_SUCCESS) {
        report(tid, "clCreateCommandQueue failed");
        return false;
      }
    }
    stream = own;
    ok(tid, dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, da, 0, a.data(), 0, a.size() * 4, stream),
       "copy a");
    ok(tid, dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, db, 0, b.data(), 0, b.size() * 4, stream),
       "copy b");
    ok(tid, dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, dbias, 0, bias.data(), 0, bias.size() * 4, stream),
       "copy bias");
    const DLDataType f32{kDLFloat, 32, 1};
    ta = DLTensor{da, dev, 2, f32, sa, nullptr, 0};
    tb = DLTensor{db, dev, 2, f32, sb, nullptr, 0};
    tbias = DLTensor{dbias, dev, 1, f32, sbias, nullptr, 0};
    tout = DLTensor{dout, dev, 2, f32, so, nullptr, 0};
    tamx = DLTensor{damx, dev, 2, f32, so, nullptr, 0};
    return true;
  }();
  gate->fetch_sub(1);
  while (gate->load() > 0) std::this_thread::yield();  // all threads call at once
  if (!ready) return;
  for (int it = 0; it < iters && !g_fail.load(); ++it) {
    // out = relu(a @ b + bias); amx = sigmoid(out + bias + 0.5 * out)
    if (!ok(tid, dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &tout, 0, stream), "matmul_add_relu")) return;
    if (!ok(tid, dlfuse_add_mul_activation(reg, &tout, &tout, &tbias, 0.5, DLFUSE_ACT_SIGMOID, &tamx, stream),
            "add_mul_activation"))
      return;
    std::vector<float> amx(out.size());
    if (!ok(tid, dlfuse_device_synchronize(reg, dev, stream), "synchronize") ||
        !ok(tid,
            dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, amx.data(), 0, damx, 0, amx.size() * 4, stream),
            "copy back"))
      return;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = bias[size_t(n)];
        for (int64_t k = 0; k < K; ++k) acc += double(a[size_t(m * K + k)]) * b[size_t(k * N + n)];
        const double o = acc > 0 ? acc : 0;  // exact: the inputs are on a coarse dyadic grid
        const double ref = 1.0 / (1.0 + std::exp(-(o + bias[size_t(n)] + 0.5 * o)));
        if (std::fabs(amx[size_t(m * N + n)] - ref) > 1e-5) {
          report(tid, "iteration " + std::to_string(it) + ": wrong value at (" + std::to_string(m) + ", " +
                          std::to_string(n) + "): " + std::to_string(amx[size_t(m * N + n)]) + " vs " +
                          std::to_string(ref));
          return;
        }
      }
  }
  for (void* p : {da, db, dbias, dout, damx}) dlfuse_device_free(reg, dev, p);
  if (own) clReleaseCommandQueue(own);
}

dlfuse_registry_t open_registry(const char* plugin) {
  dlfuse_registry_options_t ro{};
  ro.struct_size = sizeof ro;
  ro.discovery = DLFUSE_DISCOVER_NONE;
  dlfuse_registry_t reg = nullptr;
  int32_t idx = -1;
  if (dlfuse_registry_create(&ro, &reg) != DLFUSE_STATUS_OK ||
      dlfuse_registry_load(reg, plugin, &idx) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "cannot load %s: %s\n", plugin, dlfuse_last_error());
    dlfuse_registry_destroy(reg);
    return nullptr;
  }
  return reg;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLUGIN.so [threads] [iterations]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 6, iters = argc > 3 ? std::atoi(argv[3]) : 10;
  dlfuse_registry_t warm = open_registry(argv[1]);
  if (!warm) return 1;
  for (int t = 0; t < threads; ++t) {
    std::atomic<int> alone{1};
    worker(warm, t, 1, &alone);
  }
  dlfuse_registry_destroy(warm);
  dlfuse_registry_t reg = open_registry(argv[1]);
  if (!reg) return 1;
  std::atomic<int> gate{threads};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, reg, t, iters, &gate);
  for (auto& t : pool) t.join();
  dlfuse_registry_destroy(reg);
  std::printf("%d threads x %d iterations: %s\n", threads, iters, g_fail.load() ? "FAILED" : "ok");
  return g_fail.load() ? 1 : 0;
}
