// Raw oneDNN peer of bench/run.py: the primitives a oneDNN user would write for the two
// ops (float32, CPU), and the CPU GEMM ceiling. Rows in the driver's format and timing
// (bench/driver/timing.hpp), so that they sit beside dlfuse_onednn's rows.
//
//   dlfuse_bench_onednn [--mode quick|full] [--ops LIST] [--shapes MxKxN,MxN,...] [--gemm-peak]
//
// matmul_add_relu fwd: `onednn_raw` = matmul with a bias and a plain relu post-op (maps NaN
// to 0), `onednn_raw_nankeep` = the same with the post-ops dlfuse uses for its NaN-keeping
// relu (elu with alpha 0, then linear 1, 0): dlfuse_onednn vs this one is the cost of the
// registry path alone. add_mul_activation fwd (relu, multiplier 0.5): one binary primitive
// with a src1 scale, then bias-add and relu post-ops. --gemm-peak: plain f32 matmul 4096^3
// (2048^3 in quick mode), reported as a ceiling.
#include <oneapi/dnnl/dnnl.hpp>

#include "../driver/timing.hpp"

namespace {

using namespace bench;
using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;

std::vector<float> values(size_t n, uint64_t seed) {  // uniform in [-1, 1), never all zeros
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes_arg;
  std::vector<std::string> ops{"matmul_add_relu", "add_mul_activation"};
  bool gemm_peak = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc && parse_mode(argv[i + 1]))
      ++i;
    else if (a == "--shapes" && i + 1 < argc)
      shapes_arg = argv[++i];
    else if (a == "--ops" && i + 1 < argc)
      ops = split_list(argv[++i]);
    else if (a == "--gemm-peak")
      gemm_peak = true;
    else {
      std::fprintf(stderr, "usage: %s [--mode quick|full] [--ops LIST] [--shapes LIST] [--gemm-peak]\n", argv[0]);
      return 2;
    }
  }
  const auto want = [&](const char* op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); };
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto sync = [&strm] { strm.wait(); };
  int batch = 0;

  if (gemm_peak) {
    const long n = g_mode == Mode::full ? 4096 : 2048;
    std::vector<float> a = values(size_t(n * n), 21), b = values(size_t(n * n), 22), c(size_t(n * n));
    memory::desc md({n, n}, dt::f32, tag::ab);
    matmul::primitive_desc pd(matmul::desc(md, md, md), eng);
    matmul prim(pd);
    memory A(md, eng, a.data()), B(md, eng, b.data()), C(md, eng, c.data());
    const Stats s = time_calls(
        [&](int) {
          prim.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
        },
        sync, &batch);
    std::printf(
        "{\"ceiling\": \"gemm_peak\", \"device\": \"cpu:0\", \"dtype\": \"float32\", \"impl\": "
        "\"onednn_matmul_%ld^3\", \"GFLOPs\": %.3f, \"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, "
        "\"min_ms\": %.6g, \"rounds\": %d, \"onednn_impl\": \"%s\"}\n",
        n, 2.0 * double(n) * double(n) * double(n) / s.median / 1e9, s.median * 1e3, s.p10 * 1e3, s.p90 * 1e3,
        s.min * 1e3, s.n, pd.impl_info_str());
    std::fflush(stdout);
  }

  const auto shapes =
      shapes_arg.empty()
          ? std::vector<std::vector<int64_t>>{{2048, 512, 256}, {4096, 1024, 1024}, {2048, 512}, {16384, 8192}}
          : parse_shapes(shapes_arg);
  for (const auto& s : shapes) {
    if (s.size() == 3 && want("matmul_add_relu")) {
      const long M = s[0], K = s[1], N = s[2];
      std::vector<float> a = values(size_t(M * K), 1), b = values(size_t(K * N), 2), bias = values(size_t(N), 3);
      std::vector<float> out(size_t(M * N));
      memory::desc a_md({M, K}, dt::f32, tag::ab), b_md({K, N}, dt::f32, tag::ab), bias_md({1, N}, dt::f32, tag::ab),
          c_md({M, N}, dt::f32, tag::ab);
      memory A(a_md, eng, a.data()), B(b_md, eng, b.data()), Bi(bias_md, eng, bias.data()), C(c_md, eng, out.data());
      post_ops plain, nankeep;
      plain.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      nankeep.append_eltwise(1.f, algorithm::eltwise_elu, 0.f, 0.f);
      nankeep.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, 0.f);
      for (const auto& [impl, po] : {std::pair{"onednn_raw", plain}, std::pair{"onednn_raw_nankeep", nankeep}}) {
        primitive_attr attr;
        attr.set_post_ops(po);
        matmul prim(matmul::primitive_desc(matmul::desc(a_md, b_md, bias_md, c_md), attr, eng));
        const Stats st = time_calls(
            [&](int) {
              prim.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_BIAS, Bi}, {DNNL_ARG_DST, C}});
            },
            sync, &batch);
        row("matmul_add_relu", "fwd", "float32", dims_str(s), impl, "cpu:0", st, batch);
      }
    } else if (s.size() == 2 && want("add_mul_activation")) {
      const long M = s[0], N = s[1];
      std::vector<float> x = values(size_t(M * N), 6), y = values(size_t(M * N), 7), bias = values(size_t(N), 8);
      std::vector<float> out(size_t(M * N));
      memory::desc md({M, N}, dt::f32, tag::ab), bmd({1, N}, dt::f32, tag::ab);
      primitive_attr attr;
      attr.set_scales(DNNL_ARG_SRC_1, 0, {0.5f});
      post_ops po;
      po.append_binary(algorithm::binary_add, bmd);
      po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
      binary prim(binary::primitive_desc(binary::desc(algorithm::binary_add, md, md, md), attr, eng));
      memory X(md, eng, x.data()), Y(md, eng, y.data()), B(bmd, eng, bias.data()), O(md, eng, out.data());
      const Stats st = time_calls(
          [&](int) {
            prim.execute(strm, {{DNNL_ARG_SRC_0, X},
                                {DNNL_ARG_SRC_1, Y},
                                {DNNL_ARG_DST, O},
                                {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, B}});
          },
          sync, &batch);
      row("add_mul_activation", "fwd", "float32", dims_str(s), "onednn_raw", "cpu:0", st, batch,
          ", \"activation\": \"relu\"");
    }
  }
  return 0;
}
