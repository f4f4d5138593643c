// GEMM throughput of the OpenCL plugin's matmul_add_relu forward (float32), through the
// public host API (registry -> plugin), and, when built with -DBENCH_WITH_DNNL, oneDNN's
// f32 matmul with a bias and a relu post-op on the CPU in the same process and run.
//
//   bench_gemm --plugin libdlfuse_opencl.so [--device-id I] [--shapes MxKxN,...] [--reps R]
//              [--onednn] [--no-opencl]
//
// Per shape: 2 warm-up calls, then R timed calls, each call + synchronize timed on the
// host clock; the median is reported. The result of the last call is checked on 256
// random elements against a float64 reference (a wrong kernel must not get a number).
#include <dlfuse/dlfuse.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef BENCH_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

struct Shape {
  int64_t M, K, N;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void die(const char* what, dlfuse_status_t st) {
  std::fprintf(stderr, "%s: %s: %s\n", what, dlfuse_status_string(st), dlfuse_last_error());
  std::exit(1);
}

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    Shape sh{};
    if (std::sscanf(s.substr(pos, comma - pos).c_str(), "%ldx%ldx%ld", &sh.M, &sh.K, &sh.N) != 3) {
      std::fprintf(stderr, "bad shape '%s' (want MxKxN)\n", s.substr(pos, comma - pos).c_str());
      std::exit(2);
    }
    out.push_back(sh);
    pos = comma + 1;
  }
  return out;
}

// Checks 256 random elements of relu(A@B + bias) in float64.
int check(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& bias,
          const std::vector<float>& C, const Shape& s, double* max_rel) {
  std::mt19937_64 rng(7);
  int bad = 0;
  *max_rel = 0;
  for (int t = 0; t < 256; ++t) {
    const int64_t m = int64_t(rng() % uint64_t(s.M)), n = int64_t(rng() % uint64_t(s.N));
    double acc = bias[size_t(n)], mag = std::fabs(bias[size_t(n)]);
    for (int64_t k = 0; k < s.K; ++k) {
      acc += double(A[size_t(m * s.K + k)]) * B[size_t(k * s.N + n)];
      mag += std::fabs(double(A[size_t(m * s.K + k)]) * B[size_t(k * s.N + n)]);
    }
    const double ref = acc > 0 ? acc : 0;
    const double err = std::fabs(C[size_t(m * s.N + n)] - ref);
    *max_rel = std::max(*max_rel, err / (mag + 1e-30));
    if (err > 1e-6 + 2e-5 * mag) ++bad;
  }
  return bad;
}

struct Result {
  double ms, gflops;  // each call followed by synchronize (latency included)
  int bad;
  double pipe_ms = 0, pipe_gflops = 0;  // calls back to back, one synchronize per round
};

Result bench_opencl(dlfuse_registry_t reg, int32_t dev_id, const Shape& s, int reps) {
  const DLDevice dev{kDLOpenCL, dev_id};
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), bias(size_t(s.N)), C(size_t(s.M * s.N));
  for (auto* v : {&A, &B, &bias})
    for (float& x : *v) x = u(rng);
  void *da, *db, *dbias, *dc;
  dlfuse_status_t st;
  if ((st = dlfuse_device_alloc(reg, dev, A.size() * 4, &da)) || (st = dlfuse_device_alloc(reg, dev, B.size() * 4, &db)) ||
      (st = dlfuse_device_alloc(reg, dev, bias.size() * 4, &dbias)) ||
      (st = dlfuse_device_alloc(reg, dev, C.size() * 4, &dc)))
    die("device_alloc", st);
  if ((st = dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, da, 0, A.data(), 0, A.size() * 4, nullptr)) ||
      (st = dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, db, 0, B.data(), 0, B.size() * 4, nullptr)) ||
      (st = dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, dbias, 0, bias.data(), 0, bias.size() * 4, nullptr)))
    die("device_copy", st);
  int64_t sa[2] = {s.M, s.K}, sb[2] = {s.K, s.N}, sbias[1] = {s.N}, sc[2] = {s.M, s.N};
  const DLDataType f32{kDLFloat, 32, 1};
  DLTensor ta{da, dev, 2, f32, sa, nullptr, 0}, tb{db, dev, 2, f32, sb, nullptr, 0};
  DLTensor tbias{dbias, dev, 1, f32, sbias, nullptr, 0}, tc{dc, dev, 2, f32, sc, nullptr, 0};
  std::vector<double> ts;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if ((st = dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &tc, 0, nullptr))) die("matmul_add_relu", st);
    if ((st = dlfuse_device_synchronize(reg, dev, nullptr))) die("synchronize", st);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) ts.push_back(dt);
  }
  // Back to back: `reps` calls, one synchronize; median per-call time of 3 rounds.
  std::vector<double> pipe;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      if ((st = dlfuse_matmul_add_relu(reg, &ta, &tb, &tbias, &tc, 0, nullptr))) die("matmul_add_relu", st);
    if ((st = dlfuse_device_synchronize(reg, dev, nullptr))) die("synchronize", st);
    pipe.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  if ((st = dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, C.data(), 0, dc, 0, C.size() * 4, nullptr)))
    die("device_copy back", st);
  double max_rel;
  Result res{};
  res.bad = check(A, B, bias, C, s, &max_rel);
  for (void* p : {da, db, dbias, dc}) dlfuse_device_free(reg, dev, p);
  const double t = median(ts);
  res.ms = t * 1e3;
  res.gflops = 2.0 * double(s.M) * double(s.K) * double(s.N) / t / 1e9;
  res.pipe_ms = median(pipe) * 1e3;
  res.pipe_gflops = 2.0 * double(s.M) * double(s.K) * double(s.N) / median(pipe) / 1e9;
  return res;
}

#ifdef BENCH_WITH_DNNL
Result bench_onednn(const Shape& s, int reps) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto f32 = memory::data_type::f32;
  memory::desc a_md({s.M, s.K}, f32, memory::format_tag::ab), b_md({s.K, s.N}, f32, memory::format_tag::ab),
      bias_md({1, s.N}, f32, memory::format_tag::ab), c_md({s.M, s.N}, f32, memory::format_tag::ab);
  post_ops po;
  po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  matmul::primitive_desc pd(matmul::desc(a_md, b_md, bias_md, c_md), attr, eng);
  matmul prim(pd);
  memory A(a_md, eng), B(b_md, eng), Bi(bias_md, eng), C(c_md, eng);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (memory* m : {&A, &B, &Bi}) {
    float* p = static_cast<float*>(m->get_data_handle());
    for (size_t i = 0; i < m->get_desc().get_size() / 4; ++i) p[i] = u(rng);
  }
  std::vector<double> ts;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    prim.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_BIAS, Bi}, {DNNL_ARG_DST, C}});
    strm.wait();
    if (r >= 2) ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double t = median(ts);
  return Result{t * 1e3, 2.0 * double(s.M) * double(s.K) * double(s.N) / t / 1e9, 0};
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string plugin, shapes = "2048x512x256,4096x1024x1024";
  int32_t dev_id = 0;
  int reps = 10;
  bool onednn = false, opencl = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return std::string(argv[++i]);
    };
    if (a == "--plugin") plugin = next();
    else if (a == "--device-id") dev_id = std::atoi(next().c_str());
    else if (a == "--shapes") shapes = next();
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--onednn") onednn = true;
    else if (a == "--no-opencl") opencl = false;
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  const std::vector<Shape> list = parse_shapes(shapes);
  int failures = 0;
  if (opencl) {
    if (plugin.empty()) { std::fprintf(stderr, "--plugin is required\n"); return 2; }
    dlfuse_registry_options_t ro{};
    ro.struct_size = sizeof ro;
    ro.discovery = DLFUSE_DISCOVER_NONE;
    dlfuse_registry_t reg;
    dlfuse_status_t st = dlfuse_registry_create(&ro, &reg);
    if (st) die("registry_create", st);
    int32_t idx;
    if ((st = dlfuse_registry_load(reg, plugin.c_str(), &idx))) die("load", st);
    dlfuse_plugin_info_t info{};
    info.struct_size = sizeof info;
    dlfuse_registry_plugin_info(reg, idx, &info);
    if (!info.available) {
      std::fprintf(stderr, "plugin unavailable: %s\n", info.reason);
      return 1;
    }
    for (const Shape& s : list) {
      const Result r = bench_opencl(reg, dev_id, s, reps);
      failures += r.bad;
      std::printf("RESULT impl=opencl device=opencl:%d shape=%ldx%ldx%ld ms=%.4f gflops=%.1f pipelined_ms=%.4f "
                  "pipelined_gflops=%.1f check=%s\n",
                  dev_id, s.M, s.K, s.N, r.ms, r.gflops, r.pipe_ms, r.pipe_gflops, r.bad ? "FAIL" : "ok");
      std::fflush(stdout);
    }
    dlfuse_registry_destroy(reg);
  }
  if (onednn) {
#ifdef BENCH_WITH_DNNL
    for (const Shape& s : list) {
      const Result r = bench_onednn(s, reps);
      std::printf("RESULT impl=onednn-2.6-f32 device=cpu shape=%ldx%ldx%ld ms=%.4f gflops=%.1f check=n/a\n", s.M, s.K, s.N,
                  r.ms, r.gflops);
      std::fflush(stdout);
    }
#else
    std::fprintf(stderr, "built without oneDNN (-DBENCH_WITH_DNNL)\n");
    return 2;
#endif
  }
  return failures ? 1 : 0;
}
