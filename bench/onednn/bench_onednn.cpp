// One run, same process, same data: the dlfuse path (registry -> libdlfuse_onednn.so)
// against raw oneDNN primitives built by hand, for the shapes of shared/anchors
// (dnnl_anchor.cpp, numpy_anchor.py). Raw and dlfuse calls alternate rep by rep so that
// load from other processes hits both alike. Prints one "RESULT" line per measurement:
//   RESULT <case> <path> <median_ms> <min_ms> <reps> <p10_ms> <p90_ms>
// Usage: bench_onednn <path/to/libdlfuse_onednn.so> [--quick] [--only SUBSTR] [--reps-scale X]
//                     [--raw-only] [--gemm-peak]
//   --raw-only   only the raw oneDNN paths (bench/run.py times dlfuse with its own driver)
//   --gemm-peak  also the CPU GEMM ceiling: plain f32 oneDNN matmul, 4096^3 (2048^3 quick)
#include <dlfuse/dlfuse.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
using namespace dnnl;

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  DLTensor t{};
  explicit Tensor(std::vector<int64_t> s, uint64_t seed = 0) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.resize(size_t(n));
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (auto& v : data) {  // uniform in [-1, 1)
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
    }
    t.data = data.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
  }
};

double ms_since(clk::time_point t0) { return std::chrono::duration<double, std::milli>(clk::now() - t0).count(); }

void check(dlfuse_status_t st, const char* what) {
  if (st != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, dlfuse_last_error());
    std::exit(1);
  }
}

std::string g_only;        // --only SUBSTR: run the cases whose name contains it
bool g_raw_only = false;   // --raw-only: skip the dlfuse paths
double g_reps_scale = 1.0;  // --reps-scale X: X times the default repetitions

bool measure_paths(const std::string& name, int reps,
                   const std::vector<std::pair<std::string, std::function<void()>>>& paths);

// Times the given paths alternately, `reps` times each after one warm-up call each.
bool measure(const std::string& name, int reps, const std::vector<std::pair<std::string, std::function<void()>>>& paths) {
  if (!g_only.empty() && name.find(g_only) == std::string::npos) return false;
  reps = std::max(1, int(reps * g_reps_scale + 0.5));
  std::vector<std::pair<std::string, std::function<void()>>> kept;
  for (auto& p : paths)
    if (!g_raw_only || p.first.rfind("dlfuse", 0) != 0) kept.push_back(p);
  if (kept.empty()) return false;
  return measure_paths(name, reps, kept);
}

bool measure_paths(const std::string& name, int reps,
                   const std::vector<std::pair<std::string, std::function<void()>>>& paths) {
  std::vector<std::vector<double>> t(paths.size());
  for (auto& p : paths) p.second();
  // The order rotates every rep, so that no path always runs right after the same other
  // one (which would leave it, say, the other's output lines in the cache).
  for (int r = 0; r < reps; ++r)
    for (size_t j = 0; j < paths.size(); ++j) {
      const size_t i = (j + size_t(r)) % paths.size();
      const auto t0 = clk::now();
      paths[i].second();
      t[i].push_back(ms_since(t0));
    }
  for (size_t i = 0; i < paths.size(); ++i) {
    std::sort(t[i].begin(), t[i].end());
    const auto& v = t[i];
    auto q = [&v](double f) {
      const double pos = f * double(v.size() - 1);
      const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
      return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
    };
    std::printf("RESULT %s %s %.4f %.4f %d %.4f %.4f\n", name.c_str(), paths[i].first.c_str(), q(0.5), v[0], reps,
                q(0.1), q(0.9));
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s path/to/libdlfuse_onednn.so [--quick] [--only SUBSTR] [--reps-scale X]\n", argv[0]);
    return 2;
  }
  bool quick = false, gemm_peak = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) g_only = argv[++i];
    else if (std::strcmp(argv[i], "--reps-scale") == 0 && i + 1 < argc) g_reps_scale = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--raw-only") == 0) g_raw_only = true;
    else if (std::strcmp(argv[i], "--gemm-peak") == 0) gemm_peak = true;
  }
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, argv[1]};
  dlfuse_registry_t reg = nullptr;
  check(dlfuse_registry_create(&opt, &reg), "registry");
  int32_t np = 0;
  dlfuse_registry_plugin_count(reg, &np);
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof(info);
  if (np != 1 || dlfuse_registry_plugin_info(reg, 0, &info) != DLFUSE_STATUS_OK || !info.available) {
    std::fprintf(stderr, "plugin %s not available: %s\n", argv[1], np ? info.reason : "not loaded");
    return 1;
  }

  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  using dt = memory::data_type;
  using tag = memory::format_tag;

  if (gemm_peak) {  // the CPU GEMM ceiling: plain f32 matmul, no bias, no post-op
    const long n = quick ? 2048 : 4096;
    Tensor a({n, n}, 21), b({n, n}, 22), c({n, n});
    memory::desc md({n, n}, dt::f32, tag::ab);
    matmul::primitive_desc pd(matmul::desc(md, md, md), eng);
    matmul prim(pd);
    memory A(md, eng, a.data.data()), B(md, eng, b.data.data()), C(md, eng, c.data.data());
    measure_paths("gemm_peak_f32_" + std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n),
                  quick ? 3 : 7, {{"onednn", [&] {
                                     prim.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
                                     strm.wait();
                                   }}});
    std::printf("INFO gemm_peak impl %s\n", pd.impl_info_str());
  }

  struct MM { long M, K, N; int reps; } mms[] = {{2048, 512, 256, 60}, {4096, 1024, 1024, 15}, {2048, 4096, 4096, 5}};
  for (const MM& s : mms) {
    const int reps = quick ? 2 : s.reps;
    const std::string name = "matmul_add_relu_fwd_f32_" + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" +
                             std::to_string(s.N);
    Tensor a({s.M, s.K}, 1), b({s.K, s.N}, 2), bias({s.N}, 3), out({s.M, s.N}), out2({s.M, s.N}), out3({s.M, s.N});
    // Raw oneDNN, as in shared/anchors/dnnl_anchor.cpp: matmul + bias + relu post-op.
    memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), b_md({s.K, s.N}, dt::f32, tag::ab),
        bias_md({1, s.N}, dt::f32, tag::ab), c_md({s.M, s.N}, dt::f32, tag::ab);
    post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(po);
    matmul::primitive_desc pd(matmul::desc(a_md, b_md, bias_md, c_md), attr, eng);
    matmul prim(pd);
    // The same primitive with the post-ops dlfuse uses for a NaN-keeping relu (elu with
    // alpha 0, then linear 1, 0): dlfuse vs this one is the cost of the registry path alone.
    post_ops po_nan;
    po_nan.append_eltwise(1.f, algorithm::eltwise_elu, 0.f, 0.f);
    po_nan.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, 0.f);
    primitive_attr attr_nan;
    attr_nan.set_post_ops(po_nan);
    matmul prim_nan(matmul::primitive_desc(matmul::desc(a_md, b_md, bias_md, c_md), attr_nan, eng));
    memory A(a_md, eng, a.data.data()), B(b_md, eng, b.data.data()), Bi(bias_md, eng, bias.data.data()),
        C(c_md, eng, out2.data.data()), C3(c_md, eng, out3.data.data());  // each path its own output
    const bool ran = measure(name, reps,
            {{"onednn", [&] {
                prim.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_BIAS, Bi}, {DNNL_ARG_DST, C}});
                strm.wait();
              }},
             {"onednn_nankeep", [&] {
                prim_nan.execute(strm,
                                 {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_BIAS, Bi}, {DNNL_ARG_DST, C3}});
                strm.wait();
              }},
             {"dlfuse", [&] { check(dlfuse_matmul_add_relu(reg, &a.t, &b.t, &bias.t, &out.t, 0, nullptr), "mm"); }}});
    // Same results (relu(NaN) aside, there is none here): the max difference, for the record.
    if (ran && !g_raw_only) {
      double md = 0;
      for (size_t i = 0; i < out.data.size(); ++i) md = std::max(md, double(std::abs(out.data[i] - out2.data[i])));
      std::printf("INFO %s max|dlfuse-onednn| = %.3g, impl %s\n", name.c_str(), md, pd.impl_info_str());
    }
    // bfloat16 through dlfuse: oneDNN 2.6.3 has no bf16 matmul on this AVX2 CPU (the raw
    // primitive descriptor fails), so the plugin converts to float32 and back.
    if (s.M * s.K * s.N <= 4096L * 1024 * 1024) {
      const std::string bname = "matmul_add_relu_fwd_bf16_" + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" +
                                std::to_string(s.N);
      bool raw_bf16 = true;
      try {
        memory::desc h({s.M, s.K}, dt::bf16, tag::ab);
        matmul::primitive_desc(matmul::desc(h, memory::desc({s.K, s.N}, dt::bf16, tag::ab),
                                            memory::desc({s.M, s.N}, dt::bf16, tag::ab)),
                               eng);
      } catch (const dnnl::error&) {
        raw_bf16 = false;
      }
      auto to_bf16 = [](Tensor& t) {  // reuse the float storage: the upper halves are unused
        uint16_t* p = reinterpret_cast<uint16_t*>(t.data.data());
        for (size_t i = 0; i < t.data.size(); ++i) {
          uint32_t u;
          std::memcpy(&u, &t.data[i], 4);
          p[i] = uint16_t(u >> 16);
        }
        t.t.dtype = {kDLBfloat, 16, 1};
      };
      Tensor ha({s.M, s.K}, 1), hb({s.K, s.N}, 2), hbias({s.N}, 3), hout({s.M, s.N});
      to_bf16(ha);
      to_bf16(hb);
      to_bf16(hbias);
      to_bf16(hout);
      if (measure(bname, reps, {{"dlfuse", [&] {
                                  check(dlfuse_matmul_add_relu(reg, &ha.t, &hb.t, &hbias.t, &hout.t, 0, nullptr),
                                        "mm bf16");
                                }}}))
        std::printf("INFO %s raw oneDNN bf16 matmul on this CPU: %s\n", bname.c_str(),
                    raw_bf16 ? "available" : "none (no primitive descriptor)");
    }
  }

  // matmul backward through dlfuse (no single raw oneDNN counterpart; NumPy compares).
  for (const MM& s : {mms[0], mms[1]}) {
    const int reps = quick ? 2 : std::max(3, s.reps / 2);
    const std::string name = "matmul_add_relu_bwd_f32_" + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" +
                             std::to_string(s.N);
    Tensor g({s.M, s.N}, 4), a({s.M, s.K}, 1), b({s.K, s.N}, 2), out({s.M, s.N}, 5), ga({s.M, s.K}), gb({s.K, s.N}),
        gbias({s.N});
    measure(name, reps, {{"dlfuse", [&] {
                            check(dlfuse_matmul_add_relu_backward(reg, &g.t, &a.t, &b.t, &out.t, &ga.t, &gb.t,
                                                                  &gbias.t, 0, nullptr),
                                  "mm bwd");
                          }}});
  }

  struct AM { long M, N; int reps; } ams[] = {{2048, 512, 200}, {16384, 8192, 15}};
  const float mult = 0.5f;
  for (const AM& s : ams) {
    const int reps = quick ? 2 : s.reps;
    const std::string sfx = std::to_string(s.M) + "x" + std::to_string(s.N);
    Tensor x({s.M, s.N}, 6), y({s.M, s.N}, 7), bias({s.N}, 8), out({s.M, s.N}), out2({s.M, s.N});
    // Raw oneDNN: the same single binary primitive a oneDNN user would write, with the
    // plain relu post-op (which maps NaN to 0, unlike dlfuse's NaN-keeping relu).
    memory::desc md({s.M, s.N}, dt::f32, tag::ab), bmd({1, s.N}, dt::f32, tag::ab);
    primitive_attr attr;
    attr.set_scales(DNNL_ARG_SRC_1, 0, {mult});
    post_ops po;
    po.append_binary(algorithm::binary_add, bmd);
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
    binary::primitive_desc pd(binary::desc(algorithm::binary_add, md, md, md), attr, eng);
    binary prim(pd);
    memory X(md, eng, x.data.data()), Y(md, eng, y.data.data()), B(bmd, eng, bias.data.data()),
        O(md, eng, out2.data.data());
    measure("add_mul_relu_fwd_f32_" + sfx, reps,
            {{"onednn", [&] {
                prim.execute(strm, {{DNNL_ARG_SRC_0, X}, {DNNL_ARG_SRC_1, Y}, {DNNL_ARG_DST, O},
                                    {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, B}});
                strm.wait();
              }},
             {"dlfuse", [&] {
                check(dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t, mult, DLFUSE_ACT_RELU, &out.t, nullptr),
                      "am");
              }}});
    Tensor g({s.M, s.N}, 9), gx({s.M, s.N}), gy({s.M, s.N}), gbias({s.N});
    for (dlfuse_activation_t act : {DLFUSE_ACT_RELU, DLFUSE_ACT_GELU_ERF}) {
      const std::string an = act == DLFUSE_ACT_RELU ? "relu" : "gelu_erf";
      if (act != DLFUSE_ACT_RELU)
        measure("add_mul_" + an + "_fwd_f32_" + sfx, reps, {{"dlfuse", [&] {
                                                               check(dlfuse_add_mul_activation(reg, &x.t, &y.t, &bias.t,
                                                                                               mult, act, &out.t, nullptr),
                                                                     "am");
                                                             }}});
      measure("add_mul_" + an + "_bwd_f32_" + sfx, reps, {{"dlfuse", [&] {
                                                             check(dlfuse_add_mul_activation_backward(
                                                                       reg, &g.t, &x.t, &y.t, &bias.t, mult, act,
                                                                       &gx.t, &gy.t, &gbias.t, nullptr),
                                                                   "am bwd");
                                                           }}});
    }
  }
  dlfuse_registry_destroy(reg);
  return 0;
}
