// Concurrency and primitive-cache test of the oneDNN plugin, through the registry:
//  phase A: N threads call all eight kernels at once on shapes nobody has built yet
//           (concurrent primitive builds, concurrent executions);
//  phase B: the same calls again, many times: every result is checked against a float64
//           reference, and the plugin must build no primitive at all (its trace, enabled
//           with DLFUSE_ONEDNN_TRACE=1 and captured from stderr, lists every build).
// Usage: onednn_threads_test /abs/path/libdlfuse_onednn.so
#include <dlfuse/dlfuse.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct T {
  std::vector<float> v;
  std::vector<int64_t> shape;
  DLTensor t{};
  T(std::vector<int64_t> s, unsigned seed) : shape(std::move(s)) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    v.resize(n);
    unsigned x = seed * 2654435761u + 12345u;
    for (float& f : v) {
      x = x * 1664525u + 1013904223u;
      f = float(int(x >> 9) % 2001 - 1000) / 1024.f;  // dyadic: sums of a few are exact
    }
    t.data = v.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
  }
};

std::atomic<int> g_failures{0};

void expect_close(const char* what, const std::vector<float>& got, const std::vector<double>& ref, double tol) {
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(double(got[i]) - ref[i]) <= tol * (1.0 + std::fabs(ref[i])))) {
      if (g_failures.fetch_add(1) < 10)
        std::fprintf(stdout, "FAIL %s[%zu]: got %.9g, expected %.9g\n", what, i, double(got[i]), ref[i]);
      return;
    }
}

void check(dlfuse_status_t st, const char* what) {
  if (st != DLFUSE_STATUS_OK) {
    std::fprintf(stdout, "FAIL %s: %s\n", what, dlfuse_last_error());
    g_failures.fetch_add(1);
  }
}

// dZ [M, N] -> grad_a = dZ b^T, grad_b = a^T dZ, grad_bias = column sums, in double.
void matmul_grads(const T& a, const T& b, const std::vector<double>& dz, int64_t M, int64_t K, int64_t N,
                  std::vector<double>& rga, std::vector<double>& rgb, std::vector<double>& rgbias) {
  rga.assign(size_t(M * K), 0);
  rgb.assign(size_t(K * N), 0);
  rgbias.assign(size_t(N), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double d = dz[size_t(m * N + n)];
      rgbias[size_t(n)] += d;
      for (int64_t k = 0; k < K; ++k) {
        rga[size_t(m * K + k)] += d * b.v[size_t(k * N + n)];
        rgb[size_t(k * N + n)] += a.v[size_t(m * K + k)] * d;
      }
    }
}

// One thread's work on one shape: all eight ops (and add_mul's out form), checked.
void work(dlfuse_registry_t reg, int64_t M, int64_t K, int64_t N, unsigned seed) {
  T a({M, K}, seed), b({K, N}, seed + 1), bias({N}, seed + 2), out({M, N}, 0), g({M, N}, seed + 3);
  T ga({M, K}, 0), gb({K, N}, 0), gbias({N}, 0);
  check(dlfuse_matmul_add_relu(reg, &a.t, &b.t, &bias.t, &out.t, 0, nullptr), "matmul_add_relu");
  std::vector<double> ref(size_t(M * N)), dz(size_t(M * N)), pre_ref(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias.v[size_t(n)];
      for (int64_t k = 0; k < K; ++k) s += double(a.v[size_t(m * K + k)]) * b.v[size_t(k * N + n)];
      pre_ref[size_t(m * N + n)] = s;
      ref[size_t(m * N + n)] = s > 0 ? s : 0;
    }
  expect_close("matmul_add_relu.out", out.v, ref, 1e-5 * double(K));
  check(dlfuse_matmul_add_relu_backward(reg, &g.t, &a.t, &b.t, &out.t, &ga.t, &gb.t, &gbias.t, 0, nullptr),
        "matmul_add_relu_backward");
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = out.v[i] > 0 ? g.v[i] : 0.0;
  std::vector<double> rga, rgb, rgbias;
  matmul_grads(a, b, dz, M, K, N, rga, rgb, rgbias);
  expect_close("grad_a", ga.v, rga, 1e-5 * double(N));
  expect_close("grad_b", gb.v, rgb, 1e-5 * double(M));
  expect_close("grad_bias", gbias.v, rgbias, 1e-5 * double(M));

  // add_mul_activation on the [M, N] tensors: sigmoid, multiplier 0.75.
  T x({M, N}, seed + 4), y({M, N}, seed + 5), o({M, N}, 0), gx({M, N}, 0), gy({M, N}, 0), gbb({N}, 0);
  check(dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t, 0.75, DLFUSE_ACT_SIGMOID, &o.t, nullptr),
        "add_mul_activation");
  std::vector<double> r2(size_t(M * N)), rgx(size_t(M * N)), rgy(size_t(M * N)), rgb2(size_t(N), 0);
  for (int64_t i = 0; i < M * N; ++i) {
    const double p = double(x.v[size_t(i)]) + bias.v[size_t(i % N)] + 0.75 * double(y.v[size_t(i)]);
    const double s = 1 / (1 + std::exp(-p));
    r2[size_t(i)] = s;
    rgx[size_t(i)] = g.v[size_t(i)] * s * (1 - s);
    rgy[size_t(i)] = 0.75 * rgx[size_t(i)];
    rgb2[size_t(i % N)] += rgx[size_t(i)];
  }
  expect_close("add_mul.out", o.v, r2, 1e-5);
  check(dlfuse_add_mul_activation_backward(reg, &g.t, &x.t, &y.t, &bias.t, 0.75, DLFUSE_ACT_SIGMOID, &gx.t, &gy.t,
                                           &gbb.t, nullptr),
        "add_mul_activation_backward");
  expect_close("grad_x", gx.v, rgx, 1e-5);
  expect_close("grad_y", gy.v, rgy, 1e-5);
  expect_close("grad_bias2", gbb.v, rgb2, 1e-5 * double(M));
  // ABI 1.1: the same backward from add_mul's out.
  check(dlfuse_add_mul_activation_backward_from_out(reg, &g.t, &o.t, 0.75, DLFUSE_ACT_SIGMOID, &gx.t, &gy.t, &gbb.t,
                                                    nullptr),
        "add_mul_activation_backward_from_out");
  expect_close("from_out.grad_x", gx.v, rgx, 1e-5);
  expect_close("from_out.grad_y", gy.v, rgy, 1e-5);
  expect_close("from_out.grad_bias", gbb.v, rgb2, 1e-5 * double(M));

  // matmul_add_activation (GELU_ERF, pre written) and its backward from pre.
  T out2({M, N}, 0), pre({M, N}, 0);
  check(dlfuse_matmul_add_activation(reg, &a.t, &b.t, &bias.t, DLFUSE_ACT_GELU_ERF, &out2.t, &pre.t, 0, nullptr),
        "matmul_add_activation");
  std::vector<double> rgelu(size_t(M * N));
  for (size_t i = 0; i < rgelu.size(); ++i) {
    const double p = pre_ref[i];
    rgelu[i] = 0.5 * p * (1 + std::erf(p / std::sqrt(2.0)));
  }
  expect_close("matmul_add_activation.out", out2.v, rgelu, 1e-5 * double(K));
  expect_close("matmul_add_activation.pre", pre.v, pre_ref, 1e-5 * double(K));
  check(dlfuse_matmul_add_activation_backward(reg, &g.t, &a.t, &b.t, nullptr, &pre.t, DLFUSE_ACT_GELU_ERF, &ga.t, &gb.t,
                                              &gbias.t, 0, nullptr),
        "matmul_add_activation_backward");
  for (size_t i = 0; i < dz.size(); ++i) {
    const double p = pre.v[i];  // what the kernel saw
    dz[i] = g.v[i] * (0.5 * (1 + std::erf(p / std::sqrt(2.0))) + p * std::exp(-0.5 * p * p) / std::sqrt(2 * M_PI));
  }
  matmul_grads(a, b, dz, M, K, N, rga, rgb, rgbias);
  expect_close("act.grad_a", ga.v, rga, 1e-5 * double(N));
  expect_close("act.grad_b", gb.v, rgb, 1e-5 * double(M));
  expect_close("act.grad_bias", gbias.v, rgbias, 1e-5 * double(M));

  // matmul_add_residual in place (out is the residual) and its backward.
  T res({M, N}, seed + 6), gres({M, N}, 0);
  std::vector<double> rres(size_t(M * N));
  for (size_t i = 0; i < rres.size(); ++i) rres[i] = pre_ref[i] + res.v[i];
  check(dlfuse_matmul_add_residual(reg, &a.t, &b.t, &bias.t, &res.t, &res.t, 0, nullptr), "matmul_add_residual");
  expect_close("matmul_add_residual.out", res.v, rres, 1e-5 * double(K));
  check(dlfuse_matmul_add_residual_backward(reg, &g.t, &a.t, &b.t, &ga.t, &gb.t, &gbias.t, &gres.t, 0, nullptr),
        "matmul_add_residual_backward");
  std::vector<double> gfull(g.v.begin(), g.v.end());
  matmul_grads(a, b, gfull, M, K, N, rga, rgb, rgbias);
  expect_close("res.grad_a", ga.v, rga, 1e-5 * double(N));
  expect_close("res.grad_b", gb.v, rgb, 1e-5 * double(M));
  expect_close("res.grad_bias", gbias.v, rgbias, 1e-5 * double(M));
  expect_close("res.grad_residual", gres.v, gfull, 0);
}

// One large add_mul_activation (relu) forward, in place too, and backward: outputs above
// 16 MiB take the plugin's streaming-store path, which the small conformance cases never
// reach.
void large_check(dlfuse_registry_t reg) {
  const int64_t M = 2048, N = 2304;  // 18.9 MB per tensor
  T x({M, N}, 7), y({M, N}, 8), bias({N}, 9), out({M, N}, 0), g({M, N}, 10);
  T gx({M, N}, 0), gy({M, N}, 0), gb({N}, 0);
  check(dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t, 0.5, DLFUSE_ACT_RELU, &out.t, nullptr), "large fwd");
  std::vector<double> ref(size_t(M * N)), rg(size_t(M * N)), rgy(size_t(M * N)), rgb(size_t(N), 0);
  for (int64_t i = 0; i < M * N; ++i) {
    const double p = double(x.v[size_t(i)]) + bias.v[size_t(i % N)] + 0.5 * double(y.v[size_t(i)]);
    ref[size_t(i)] = p > 0 ? p : 0;
    rg[size_t(i)] = p > 0 ? g.v[size_t(i)] : 0;
    rgy[size_t(i)] = 0.5 * rg[size_t(i)];
    rgb[size_t(i % N)] += rg[size_t(i)];
  }
  expect_close("large.out", out.v, ref, 1e-6);
  check(dlfuse_add_mul_activation_backward(reg, &g.t, &x.t, &y.t, &bias.t, 0.5, DLFUSE_ACT_RELU, &gx.t, &gy.t, &gb.t,
                                           nullptr),
        "large bwd");
  expect_close("large.grad_x", gx.v, rg, 1e-6);
  expect_close("large.grad_y", gy.v, rgy, 1e-6);
  expect_close("large.grad_bias", gb.v, rgb, 1e-5 * double(M));
  check(dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t, 0.5, DLFUSE_ACT_RELU, &x.t, nullptr), "large in place");
  expect_close("large.in_place", x.v, ref, 1e-6);
}

void run_threads(dlfuse_registry_t reg, int threads, int iters, unsigned seed0) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      for (int i = 0; i < iters; ++i) {
        work(reg, 33, 20, 70, seed0 + unsigned(t * 100 + i));  // shape 1
        work(reg, 8, 5, 130, seed0 + unsigned(t * 100 + i));   // shape 2
      }
    });
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '/') {
    std::fprintf(stderr, "usage: %s /absolute/path/libdlfuse_onednn.so\n", argv[0]);
    return 2;
  }
  // The plugin's trace goes to stderr: capture it in a file.
  char log_path[] = "/tmp/dlfuse_onednn_threads_XXXXXX";
  const int fd = mkstemp(log_path);
  if (fd < 0) return 2;
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  setenv("DLFUSE_ONEDNN_TRACE", "1", 1);

  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, argv[1]};
  dlfuse_registry_t reg = nullptr;
  if (dlfuse_registry_create(&opt, &reg) != DLFUSE_STATUS_OK) return 2;
  const int threads = 4;
  run_threads(reg, threads, 2, 1);  // phase A: cold, concurrent builds
  std::fprintf(stderr, "PHASE B\n");
  std::fflush(stderr);
  run_threads(reg, threads, 10, 1000);  // phase B: warm
  large_check(reg);                     // no primitive: relu runs the plugin's own loop
  dlfuse_registry_destroy(reg);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);

  std::ifstream in(log_path);
  std::string line;
  int built_a = 0, built_b = 0;
  bool phase_b = false, summary = false;
  while (std::getline(in, line)) {
    if (line == "PHASE B") phase_b = true;
    if (line.find("dlfuse_onednn: built ") == 0) (phase_b ? built_b : built_a)++;
    if (line.find("primitive cache:") != std::string::npos) {
      summary = true;
      std::printf("%s\n", line.c_str());
    }
    if (line.find("dlfuse_onednn") == std::string::npos && line != "PHASE B")
      std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::remove(log_path);
  std::printf("primitives built in phase A: %d, in phase B: %d\n", built_a, built_b);
  if (built_a == 0 || !summary) {
    std::printf("FAIL: the plugin's trace is missing (built %d, summary %d)\n", built_a, int(summary));
    return 1;
  }
  if (built_b != 0) {
    std::printf("FAIL: repeated calls with the same shapes built %d primitives\n", built_b);
    return 1;
  }
  if (g_failures.load() != 0) {
    std::printf("FAIL: %d wrong results or failed calls\n", g_failures.load());
    return 1;
  }
  std::printf("PASS: %d threads, all results correct, no primitive rebuilt\n", threads);
  return 0;
}
