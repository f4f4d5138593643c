// oneDNN 2.6.3 (Debian libdnnl-dev) against oneDNN 3.2 (PyPI onednn-cpu-gomp 2023.2.0) on
// the primitives the oneDNN plugin (plugins/onednn/) builds. Standalone: build.sh compiles
// this one file twice, once per oneDNN; not part of the CMake build or of CI.
//
//   bench_dnnl26|bench_dnnl32 [--reps N] [--warmup N] [--cases a,b,...] [--list]
//
// One JSON line per case: the first primitive_desc + primitive creation (cold: JIT code
// generation included; the plugin caches primitives so this is paid once per shape), then
// `reps` timed calls after `warmup` untimed ones. Each timed call does what the plugin's
// execute() does: memory objects over the caller's pointers (with explicit strides), a
// user scratchpad, a fresh stream, execute, wait. The attributes are the plugin's
// base_attr(): user scratchpad, strict fpmath. relu is the plugin's NaN-keeping pair of
// post-ops (eltwise_elu alpha 0, then eltwise_linear 1, 0).
//
// The code is the same for both versions; `#if DNNL_VERSION_MAJOR >= 3` only where the API
// differs (op descriptors gone in 3.x, eltwise post-op without scale, runtime scales).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace dnnl;
using dt = memory::data_type;
using dims = memory::dims;

#if DNNL_VERSION_MAJOR >= 3
constexpr bool kV3 = true;
#else
constexpr bool kV3 = false;
#endif

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<float> values(size_t n, uint64_t seed) {  // uniform in [-1, 1), as bench/peers/onednn_raw.cpp
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
  }
  return v;
}

// bf16 storage (round to nearest even) for the bf16 matmul case.
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    r[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return r;
}

dims row_major(const dims& shape) {
  dims s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) s[size_t(i)] = s[size_t(i) + 1] * shape[size_t(i) + 1];
  return s;
}
memory::desc md(const dims& shape, dt t = dt::f32) { return memory::desc(shape, t, row_major(shape)); }
memory::desc md_strided(const dims& shape, const dims& strides, dt t = dt::f32) { return memory::desc(shape, t, strides); }

primitive_attr base_attr() {  // plugins/onednn/common.h base_attr()
  primitive_attr a;
  a.set_scratchpad_mode(scratchpad_mode::user);
  a.set_fpmath_mode(fpmath_mode::strict);
  return a;
}

void append_eltwise(post_ops& po, algorithm alg, float alpha, float beta) {
#if DNNL_VERSION_MAJOR >= 3
  po.append_eltwise(alg, alpha, beta);
#else
  po.append_eltwise(1.f, alg, alpha, beta);
#endif
}

enum class Act { none, relu_nankeep, gelu_tanh };
void append_act(post_ops& po, Act act) {
  if (act == Act::relu_nankeep) {  // plugins/onednn/common.h append_relu_keep_nan
    append_eltwise(po, algorithm::eltwise_elu, 0.f, 0.f);
    append_eltwise(po, algorithm::eltwise_linear, 1.f, 0.f);
  } else if (act == Act::gelu_tanh) {
    append_eltwise(po, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  }
}

matmul::primitive_desc matmul_pd(const engine& eng, const memory::desc& src, const memory::desc& wei,
                                 const memory::desc* bias, const memory::desc& dst, const primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return bias ? matmul::primitive_desc(eng, src, wei, *bias, dst, attr) : matmul::primitive_desc(eng, src, wei, dst, attr);
#else
  const matmul::desc d = bias ? matmul::desc(src, wei, *bias, dst) : matmul::desc(src, wei, dst);
  return matmul::primitive_desc(d, attr, eng);
#endif
}

// A prepared case: the primitive, its scratchpad size, and a call that builds the memory
// objects and runs it as the plugin's execute() does.
struct Prepared {
  primitive prim;
  size_t scratch_bytes = 0;
  std::string impl;
  double create_ms = 0;  // primitive_desc + primitive, inputs excluded
  std::vector<std::pair<int, std::pair<memory::desc, void*>>> args;
  std::function<double()> checksum;
};

struct Case {
  std::string name;
  double flop = 0;   // for GFLOP/s (matmuls)
  double bytes = 0;  // for GB/s (pointwise)
  int64_t tile = 0;  // > 0: the call is add_mul backward's tiled pass (see eltwise_bwd_case)
  std::function<Prepared(const engine&)> prepare;
};

// Matmul cases. M x K x N, bias [1, N] as the bias argument (the plugin's kBiasArg), dst
// [M, N]; `sum` adds dst's previous contents (matmul_add_residual); `wei_t` gives the
// weights as the transpose of a row-major [N, K] (the backward's grad_a = dZ B^T).
// Probes (names probe_*, run only when named in --cases): the layouts for which the plugin
// works around 2.6.3 (docs/onednn.md): bias_kind 1 = a [1, 1] scalar bias, 2 = a [M, 1]
// column bias, both as the bias argument; dst_t = a column-major dst.
Case matmul_case(const std::string& name, int64_t M, int64_t K, int64_t N, Act act, bool sum, bool with_bias,
                 bool wei_t = false, dt wdt = dt::f32, int bias_kind = 0, bool dst_t = false) {
  Case c;
  c.name = name;
  c.flop = 2.0 * double(M) * double(K) * double(N);
  c.prepare = [=](const engine& eng) {
    struct Bufs {
      std::vector<float> a, b, bias, dst;
      std::vector<uint16_t> a16, b16;
    };
    auto bufs = std::make_shared<Bufs>();
    bufs->a = values(size_t(M * K), 1);
    bufs->b = values(size_t(K * N), 2);
    bufs->bias = values(size_t(N), 3);
    bufs->dst = values(size_t(M * N), 4);  // the residual for `sum`
    const memory::desc src = wdt == dt::f32 ? md({M, K}) : md({M, K}, wdt);
    const memory::desc wei = wei_t ? md_strided({K, N}, {1, K}, wdt) : md({K, N}, wdt);
    const memory::desc bmd = bias_kind == 1 ? md({1, 1}) : bias_kind == 2 ? md({M, 1}) : md({1, N});
    const memory::desc dmd = dst_t ? md_strided({M, N}, {1, M}) : md({M, N});
    if (bias_kind == 2) bufs->bias = values(size_t(M), 3);
    void *pa = bufs->a.data(), *pb = bufs->b.data();
    if (wdt == dt::bf16) {
      bufs->a16 = to_bf16(bufs->a);
      bufs->b16 = to_bf16(bufs->b);
      pa = bufs->a16.data();
      pb = bufs->b16.data();
    }
    const auto tc = Clock::now();
    post_ops po;
    if (sum) po.append_sum(1.f);
    append_act(po, act);
    primitive_attr attr = base_attr();
    attr.set_post_ops(po);
    const matmul::primitive_desc pd = matmul_pd(eng, src, wei, with_bias ? &bmd : nullptr, dmd, attr);
    Prepared p;
    p.prim = matmul(pd);
    p.create_ms = ms_since(tc);
    p.scratch_bytes = pd.scratchpad_desc().get_size();
    p.impl = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, {src, pa}}, {DNNL_ARG_WEIGHTS, {wei, pb}}, {DNNL_ARG_DST, {dmd, bufs->dst.data()}}};
    if (with_bias) p.args.push_back({DNNL_ARG_BIAS, {bmd, bufs->bias.data()}});
    p.checksum = [bufs] {
      double s = 0;
      for (float v : bufs->dst) s += double(v);
      return s;
    };
    return p;
  };
  return c;
}

// add_mul_activation's oneDNN path (plugins/onednn/add_mul.cpp forward_onednn): one binary
// add, dst = x + mult * y with mult as a src1 scale, post-ops binary add of a [1, N] bias
// and the activation. The plugin takes this path for the transcendental activations
// (gelu_tanh here); relu and identity run the plugin's own loop (relu_nankeep is timed
// too, as the primitive the plugin would otherwise use).
Case binary_case(const std::string& name, int64_t R, int64_t N, Act act, float mult) {
  Case c;
  c.name = name;
  c.bytes = 4.0 * double(R) * double(N) * 3 + 4.0 * double(N);
  c.prepare = [=](const engine& eng) {
    struct Bufs {
      std::vector<float> x, y, bias, out, scale;
    };
    auto bufs = std::make_shared<Bufs>();
    bufs->x = values(size_t(R * N), 5);
    bufs->y = values(size_t(R * N), 6);
    bufs->bias = values(size_t(N), 7);
    bufs->out.assign(size_t(R * N), 0.f);
    bufs->scale = {mult};
    const auto tc = Clock::now();
    const memory::desc X = md({R, N}), B = md({1, N});
    primitive_attr attr = base_attr();
    post_ops po;
    po.append_binary(algorithm::binary_add, B);
    append_act(po, act);
    attr.set_post_ops(po);
#if DNNL_VERSION_MAJOR >= 3
    if (mult != 1.f) attr.set_scales_mask(DNNL_ARG_SRC_1, 0);  // the value is a runtime argument
    const binary::primitive_desc pd(eng, algorithm::binary_add, X, X, X, attr);
#else
    if (mult != 1.f) attr.set_scales(DNNL_ARG_SRC_1, 0, {mult});
    const binary::primitive_desc pd(binary::desc(algorithm::binary_add, X, X, X), attr, eng);
#endif
    Prepared p;
    p.prim = binary(pd);
    p.create_ms = ms_since(tc);
    p.scratch_bytes = pd.scratchpad_desc().get_size();
    p.impl = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC_0, {X, bufs->x.data()}},
              {DNNL_ARG_SRC_1, {X, bufs->y.data()}},
              {DNNL_ARG_DST, {X, bufs->out.data()}},
              {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, {B, bufs->bias.data()}}};
#if DNNL_VERSION_MAJOR >= 3
    if (mult != 1.f) p.args.push_back({DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC_1, {md({1}), bufs->scale.data()}});
#endif
    p.checksum = [bufs] {
      double s = 0;
      for (float v : bufs->out) s += double(v);
      return s;
    };
    return p;
  };
  return c;
}

// add_mul_activation_backward's / grad.cpp's eltwise_backward over a 1-D tile: diff_src =
// diff_dst * act'(src), src the pre-activation (the plugin uses 16384-element tiles in the
// tiled pass and the whole tensor in grad.cpp's dz_eltwise).
//
// With `total` > 0 the case is that tiled pass as add_mul.cpp runs it: the primitive is
// built for one tile of `len` elements and each call is an OpenMP parallel loop over the
// total / len tiles, every tile executed from inside the region (oneDNN then runs it on
// the calling thread) with its own memory objects and stream.
Case eltwise_bwd_case(const std::string& name, int64_t len, algorithm alg, int64_t total = 0) {
  Case c;
  c.name = name;
  c.tile = total > 0 ? len : 0;
  if (total > 0) len = total;  // buffers for the whole tensor; the primitive below is per tile
  c.bytes = 4.0 * double(len) * 3;
  c.prepare = [=](const engine& eng) {
    struct Bufs {
      std::vector<float> src, dd, ds;
    };
    auto bufs = std::make_shared<Bufs>();
    bufs->src = values(size_t(len), 8);
    bufs->dd = values(size_t(len), 9);
    bufs->ds.assign(size_t(len), 0.f);
    const auto tc = Clock::now();
    const memory::desc m = md({total > 0 ? c.tile : len});
#if DNNL_VERSION_MAJOR >= 3
    const eltwise_forward::primitive_desc hint(eng, prop_kind::forward_training, alg, m, m, 0.f, 0.f);
    const eltwise_backward::primitive_desc pd(eng, alg, m, m, m, 0.f, 0.f, hint, base_attr());
#else
    const eltwise_forward::primitive_desc hint(eltwise_forward::desc(prop_kind::forward_training, alg, m, 0.f, 0.f), eng);
    const eltwise_backward::primitive_desc pd(eltwise_backward::desc(alg, m, m, 0.f, 0.f), base_attr(), eng, hint);
#endif
    Prepared p;
    p.prim = eltwise_backward(pd);
    p.create_ms = ms_since(tc);
    p.scratch_bytes = pd.scratchpad_desc().get_size();
    p.impl = pd.impl_info_str();
    p.args = {{DNNL_ARG_SRC, {m, bufs->src.data()}},
              {DNNL_ARG_DIFF_DST, {m, bufs->dd.data()}},
              {DNNL_ARG_DIFF_SRC, {m, bufs->ds.data()}}};
    p.checksum = [bufs] {
      double s = 0;
      for (float v : bufs->ds) s += double(v);
      return s;
    };
    return p;
  };
  return c;
}

std::vector<Case> all_cases() {
  return {
      matmul_case("mm_bias_relu_256", 256, 256, 256, Act::relu_nankeep, false, true),
      matmul_case("mm_bias_relu_dlrm_256x512x256", 256, 512, 256, Act::relu_nankeep, false, true),
      matmul_case("mm_bias_relu_1024", 1024, 1024, 1024, Act::relu_nankeep, false, true),
      matmul_case("mm_bias_relu_2048", 2048, 2048, 2048, Act::relu_nankeep, false, true),
      matmul_case("mm_bias_gelu_tanh_1024", 1024, 1024, 1024, Act::gelu_tanh, false, true),
      matmul_case("mm_bias_sum_1024", 1024, 1024, 1024, Act::none, true, true),
      matmul_case("mm_wT_1024", 1024, 1024, 1024, Act::none, false, false, true),
      binary_case("am_gelu_tanh_4096x4096", 4096, 4096, Act::gelu_tanh, 0.5f),
      binary_case("am_relu_nankeep_4096x4096", 4096, 4096, Act::relu_nankeep, 0.5f),
      eltwise_bwd_case("eltwise_bwd_gelu_tanh_16384", 16384, algorithm::eltwise_gelu_tanh),
      eltwise_bwd_case("eltwise_bwd_gelu_tanh_16M", int64_t(4096) * 4096, algorithm::eltwise_gelu_tanh),
      eltwise_bwd_case("eltwise_bwd_gelu_tanh_tiled_16M", 16384, algorithm::eltwise_gelu_tanh, int64_t(4096) * 4096),
      matmul_case("mm_bf16_bias_relu_1024", 1024, 1024, 1024, Act::relu_nankeep, false, true, false, dt::bf16),
      matmul_case("probe_mm_bias_scalar_256", 256, 256, 256, Act::relu_nankeep, false, true, false, dt::f32, 1),
      matmul_case("probe_mm_bias_col_256", 256, 256, 256, Act::relu_nankeep, false, true, false, dt::f32, 2),
      matmul_case("probe_mm_dst_colmajor_256", 256, 256, 256, Act::relu_nankeep, false, true, false, dt::f32, 0, true),
  };
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) r.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return r;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, warmup = 5;
  std::vector<std::string> want;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup" && i + 1 < argc) warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--cases" && i + 1 < argc) want = split(argv[++i]);
    else if (a == "--list") list = true;
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--warmup N] [--cases a,b,...] [--list]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<Case> cases = all_cases();
  if (list) {
    for (const Case& c : cases) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  const dnnl_version_t* v = dnnl_version();
  char ver[64];
  std::snprintf(ver, sizeof ver, "%d.%d.%d", v->major, v->minor, v->patch);
  const char* thr = std::getenv("OMP_NUM_THREADS");
  // The first primitive of a process also pays oneDNN's one-time setup (CPU detection,
  // the primitive cache, OpenMP start-up): timed apart on a tiny matmul so that the first
  // case's create_ms is comparable with the others.
  const auto t_init = Clock::now();
  engine eng(engine::kind::cpu, 0);
  {
    const memory::desc m8 = md({8, 8});
    matmul m(matmul_pd(eng, m8, m8, nullptr, m8, base_attr()));
  }
  std::printf("{\"case\": \"init_engine_and_first_primitive\", \"dnnl\": \"%s\", \"threads\": \"%s\", "
              "\"create_ms\": %.4g}\n",
              ver, thr ? thr : "", ms_since(t_init));
  std::vector<unsigned char> scratch;

  for (const Case& c : cases) {
    if (want.empty() ? c.name.rfind("probe_", 0) == 0 : std::find(want.begin(), want.end(), c.name) == want.end())
      continue;
    Prepared p;
    try {
      p = c.prepare(eng);
    } catch (const dnnl::error& e) {
      std::printf("{\"case\": \"%s\", \"dnnl\": \"%s\", \"threads\": \"%s\", \"error\": \"%s (status %d)\"}\n",
                  c.name.c_str(), ver, thr ? thr : "", e.what(), int(e.status));
      std::fflush(stdout);
      continue;
    }
    if (scratch.size() < p.scratch_bytes) scratch.resize(p.scratch_bytes);
    const auto call = [&] {
      std::unordered_map<int, memory> args;
      for (const auto& a : p.args) args[a.first] = memory(a.second.first, eng, a.second.second);
      if (p.scratch_bytes > 0)
        args[DNNL_ARG_SCRATCHPAD] = memory(md({int64_t(p.scratch_bytes)}, dt::u8), eng, scratch.data());
      stream s(eng);
      p.prim.execute(s, args);
      s.wait();
    };
    const auto tiled_call = [&] {  // add_mul.cpp backward_fast: tiles over the OpenMP threads
      const int64_t len = c.tile, ntiles = int64_t(c.bytes / 12.0) / len;
      const auto& a = p.args;  // SRC, DIFF_DST, DIFF_SRC over the whole tensor; tile-sized desc
#pragma omp parallel for schedule(static)
      for (int64_t tile = 0; tile < ntiles; ++tile) {
        std::unordered_map<int, memory> args;
        for (const auto& x : a)
          args[x.first] = memory(x.second.first, eng, static_cast<float*>(x.second.second) + tile * len);
        stream s(eng);
        p.prim.execute(s, args);
        s.wait();
      }
    };
    if (c.tile > 0 && p.scratch_bytes > 0) {
      std::printf("{\"case\": \"%s\", \"error\": \"tiled case with a scratchpad is not handled\"}\n", c.name.c_str());
      continue;
    }
    const std::function<void()> run = c.tile > 0 ? std::function<void()>(tiled_call) : std::function<void()>(call);
    for (int i = 0; i < warmup; ++i) run();
    std::vector<double> t(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
      const auto t1 = Clock::now();
      run();
      t[size_t(i)] = ms_since(t1);
    }
    const double med = percentile(t, 0.5);
    std::printf("{\"case\": \"%s\", \"dnnl\": \"%s\", \"threads\": \"%s\", \"impl\": \"%s\", \"create_ms\": %.4g, "
                "\"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, \"min_ms\": %.6g, \"reps\": %d, \"warmup\": %d",
                c.name.c_str(), ver, thr ? thr : "", p.impl.c_str(), p.create_ms, med, percentile(t, 0.1),
                percentile(t, 0.9), *std::min_element(t.begin(), t.end()), reps, warmup);
    if (c.flop > 0) std::printf(", \"GFLOPs\": %.2f", c.flop / med / 1e6);
    if (c.bytes > 0) std::printf(", \"GBps\": %.2f", c.bytes / med / 1e6);
    std::printf(", \"checksum\": %.9g}\n", p.checksum());
    std::fflush(stdout);
  }
  (void)kV3;
  return 0;
}
