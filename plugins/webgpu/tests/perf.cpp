// The WebGPU plugin's performance check against its targets (docs/webgpu.md, "Measured"):
// float32 matmul_add_relu forward at M x K x N against the CUDA plugin's (cuBLASLt, exact
// float32) on the same GPU, and add_mul_activation's bandwidth against the GPU's copy
// bandwidth: a device-to-device copy through the CUDA plugin where there is one (wgpu's
// buffer copy reaches a fraction of it, so it is printed but is no ceiling), else through
// the WebGPU plugin; all in one run. Every time is taken the bench's way
// (bench/driver/timing.hpp): batches of back-to-back calls closed by a device synchronize,
// the median over batches of the time per call, so a fast call is not timed as submission
// plus synchronize latency and every line compares like for like with bench/run.py's rows.
//
//   dlfuse_webgpu_perf [M K N [ROWS COLS [MODE]]]   defaults: 8192 4096 4096 8192 8192 full
// MODE: full (2 s a case), quick (0.3 s) or smoke (3 calls, for tests).
// Exit status: 0 when both targets are met (>= 50% of cuBLAS, >= 80% of the copy bandwidth),
// 1 when one is missed, 2 when a call fails or a device is missing.
#include <dlfuse/dlfuse.h>

#include "timing.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

dlfuse_registry_t reg = nullptr;

[[noreturn]] void die(const std::string& what, dlfuse_status_t st) {
  std::fprintf(stderr, "%s: %s: %s\n", what.c_str(), dlfuse_status_string(st), dlfuse_last_error());
  std::exit(2);
}

struct Tensor {
  DLDevice dev{};
  std::vector<int64_t> shape;
  void* data = nullptr;
  DLTensor t{};
  Tensor(DLDevice d, std::vector<int64_t> s, uint64_t seed) : dev(d), shape(std::move(s)) {
    size_t n = 1;
    for (int64_t v : shape) n *= size_t(v);
    if (dlfuse_status_t st = dlfuse_device_alloc(reg, dev, n * 4, &data)) die("alloc", st);
    std::vector<float> host(n);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& f : host) f = u(rng);
    if (dlfuse_status_t st =
            dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, data, 0, host.data(), 0, n * 4, nullptr))
      die("upload", st);
    t.data = data;
    t.device = dev;
    t.ndim = int32_t(shape.size());
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = shape.data();
  }
  ~Tensor() { dlfuse_device_free(reg, dev, data); }
  size_t bytes() const {
    size_t n = 4;
    for (int64_t v : shape) n *= size_t(v);
    return n;
  }
};

// Median seconds per call of f (bench/driver/timing.hpp's batches).
double median_seconds(DLDevice dev, const std::function<dlfuse_status_t()>& f, const char* what) {
  int batch = 0;
  const bench::Stats s = bench::time_calls(
      [&](int) {
        if (dlfuse_status_t st = f()) die(what, st);
      },
      [&] {
        if (dlfuse_status_t st = dlfuse_device_synchronize(reg, dev, nullptr)) die(what, st);
      },
      &batch);
  return s.median;
}

bool has_device(int32_t type) {
  int32_t n = 0;
  return dlfuse_device_count(reg, type, &n) == DLFUSE_STATUS_OK && n > 0;
}

double matmul_seconds(DLDevice dev, int64_t M, int64_t K, int64_t N) {
  Tensor a(dev, {M, K}, 1), b(dev, {K, N}, 2), bias(dev, {N}, 3), out(dev, {M, N}, 4);
  return median_seconds(
      dev, [&] { return dlfuse_matmul_add_relu(reg, &a.t, &b.t, &bias.t, &out.t, 0, nullptr); }, "matmul_add_relu");
}

}  // namespace

int main(int argc, char** argv) {
  const auto arg = [&](int i, int64_t d) { return argc > i ? std::atoll(argv[i]) : d; };
  const int64_t M = arg(1, 8192), K = arg(2, 4096), N = arg(3, 4096), rows = arg(4, 8192), cols = arg(5, 8192);
  if (argc > 6 && !bench::parse_mode(argv[6])) {
    std::fprintf(stderr, "MODE: expected full, quick or smoke, got %s\n", argv[6]);
    return 2;
  }
  if (dlfuse_status_t st = dlfuse_registry_create(nullptr, &reg)) die("registry", st);
  if (!has_device(kDLWebGPU)) {
    std::fprintf(stderr, "no WebGPU device: is the webgpu plugin available? (dlfuse list)\n");
    return 2;
  }
  const DLDevice wg{kDLWebGPU, 0}, cu{kDLCUDA, 0};
  const double flop = 2.0 * double(M) * double(K) * double(N);
  int rc = 0;

  const double t_wg = matmul_seconds(wg, M, K, N);
  std::printf("matmul_add_relu float32 %lldx%lldx%lld  webgpu: %.3f ms  %.1f GFLOP/s\n", (long long)M, (long long)K,
              (long long)N, t_wg * 1e3, flop / t_wg * 1e-9);
  if (has_device(kDLCUDA)) {
    const double t_cu = matmul_seconds(cu, M, K, N);
    const double pct = 100.0 * t_cu / t_wg;
    std::printf("matmul_add_relu float32 %lldx%lldx%lld  cuda (cuBLASLt): %.3f ms  %.1f GFLOP/s\n", (long long)M,
                (long long)K, (long long)N, t_cu * 1e3, flop / t_cu * 1e-9);
    std::printf("RATIO matmul webgpu/cuBLAS: %.1f%% (target >= 50%%)\n", pct);
    if (pct < 50.0) rc = 1;
  } else {
    std::printf("RATIO matmul webgpu/cuBLAS: no CUDA device, not measured\n");
  }

  {
    Tensor x(wg, {rows, cols}, 5), y(wg, {rows, cols}, 6), bias(wg, {cols}, 7), out(wg, {rows, cols}, 8);
    const double t_am = median_seconds(
        wg, [&] { return dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t, 0.5, DLFUSE_ACT_RELU, &out.t, nullptr); },
        "add_mul_activation");
    const double t_cp = median_seconds(
        wg,
        [&] {
          return dlfuse_device_copy(reg, wg, DLFUSE_COPY_DEVICE_TO_DEVICE, out.data, 0, x.data, 0, x.bytes(), nullptr);
        },
        "device copy");
    const double bw_am = 3.0 * double(x.bytes()) / t_am,
                 bw_cp = 2.0 * double(x.bytes()) / t_cp;  // read x, y; write out
    std::printf("add_mul_activation float32 %lldx%lld  webgpu: %.3f ms  %.1f GB/s\n", (long long)rows, (long long)cols,
                t_am * 1e3, bw_am * 1e-9);
    std::printf("device copy %zu bytes  webgpu: %.3f ms  %.1f GB/s (read + write)\n", x.bytes(), t_cp * 1e3,
                bw_cp * 1e-9);
    double ceiling = bw_cp;
    const char* ceiling_name = "the WebGPU copy";
    if (has_device(kDLCUDA)) {
      Tensor cx(cu, {rows, cols}, 9), cout(cu, {rows, cols}, 10);
      const double t_cc = median_seconds(
          cu,
          [&] {
            return dlfuse_device_copy(reg, cu, DLFUSE_COPY_DEVICE_TO_DEVICE, cout.data, 0, cx.data, 0, cx.bytes(),
                                      nullptr);
          },
          "CUDA device copy");
      ceiling = 2.0 * double(cx.bytes()) / t_cc;
      ceiling_name = "the CUDA copy";
      std::printf("device copy %zu bytes  cuda: %.3f ms  %.1f GB/s (read + write)\n", cx.bytes(), t_cc * 1e3,
                  ceiling * 1e-9);
    }
    const double pct = 100.0 * bw_am / ceiling;
    std::printf("RATIO add_mul_activation/copy bandwidth (%s): %.1f%% (target >= 80%%)\n", ceiling_name, pct);
    if (pct < 80.0) rc = 1;
    // The backward with the bias gradient summed over the rows (no target: printed against
    // the same ceiling, its five full arrays as the bytes).
    Tensor g(wg, {rows, cols}, 11), gx(wg, {rows, cols}, 12), gy(wg, {rows, cols}, 13), gb(wg, {cols}, 14);
    const double t_bw = median_seconds(
        wg,
        [&] {
          return dlfuse_add_mul_activation_backward(reg, &g.t, &x.t, &y.t, &bias.t, 0.5, DLFUSE_ACT_RELU, &gx.t, &gy.t,
                                                    &gb.t, nullptr);
        },
        "add_mul_activation_backward");
    const double bw_bw = 5.0 * double(x.bytes()) / t_bw;  // read grad_out, x, y; write grad_x, grad_y
    std::printf("add_mul_activation_backward float32 %lldx%lld  webgpu: %.3f ms  %.1f GB/s, %.1f%% of %s\n",
                (long long)rows, (long long)cols, t_bw * 1e3, bw_bw * 1e-9, 100.0 * bw_bw / ceiling, ceiling_name);
  }
  dlfuse_registry_destroy(reg);
  return rc;
}
