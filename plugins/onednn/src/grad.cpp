// dZ passes and reductions shared by the backward kernels (grad.h), and the forward's
// activation pass.
#include "grad.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "activation.h"
#include "loops.h"

namespace dlfuse_onednn {
namespace {

enum KeyKind : int64_t { kReduction = 2, kEltwiseBwd = 3 };  // matmul.cpp uses 1 and 4, add_mul.cpp 10 and 11

// dz = grad_out * act'(pre) for a transcendental activation with oneDNN's eltwise_backward
// (vectorized exp/erf/tanh) over the whole compact tensor in one call; false where the
// layout or the activation is not one it takes (the scalar row pass runs instead).
bool dz_eltwise(State& st, const View& g, const View* src, const DzRule& rule, const View& dz) {
  dnnl::algorithm alg;
  float alpha;
  if (rule.from_out || !src || !eltwise_alg(rule.act, &alg, &alpha)) return false;
  if (!is_compact(g) || !is_compact(*src)) return false;
  const int64_t len = dz.numel();
  const dnnl::memory::desc md({len}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  auto p = st.get<dnnl::eltwise_backward>(Key{kEltwiseBwd, int64_t(alg), len}, [&] {
    dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, alpha, 0.f), st.engine);
    return dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(alg, md, md, alpha, 0.f), base_attr(),
                                                  st.engine, hint);
  });
  execute(st, *p,
          {{DNNL_ARG_SRC, mem(st, md, src->data)},
           {DNNL_ARG_DIFF_DST, mem(st, md, g.data)},
           {DNNL_ARG_DIFF_SRC, mem(st, md, dz.data)}});
  return true;
}

// One row of dZ: zp[0, n) from grad_out (stride gs) and src (stride ss).
void dz_row(const DzRule& rule, float* zp, const float* gp, int64_t gs, const float* sp, int64_t ss, int64_t n) {
  if (rule.act == DLFUSE_ACT_IDENTITY) {
    if (gs == 1)
      std::memcpy(zp, gp, size_t(n) * sizeof(float));
    else
      for (int64_t j = 0; j < n; ++j) zp[j] = gp[j * gs];
  } else if (rule.act == DLFUSE_ACT_RELU) {  // the same select from pre and from out
    if (gs == 1 && ss == 1)
      loops::relu_select(zp, sp, gp, n);
    else
      for (int64_t j = 0; j < n; ++j) zp[j] = sp[j * ss] <= 0.f ? 0.f : gp[j * gs];
  } else if (rule.from_out && rule.act == DLFUSE_ACT_SIGMOID) {
    for (int64_t j = 0; j < n; ++j) {
      const float o = sp[j * ss];
      zp[j] = gp[j * gs] * (o * (1.f - o));
    }
  } else if (rule.from_out) {  // TANH (the registry refuses the others with out)
    for (int64_t j = 0; j < n; ++j) {
      const float o = sp[j * ss];
      zp[j] = gp[j * gs] * (1.f - o * o);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) zp[j] = act_bwd(rule.act, sp[j * ss], gp[j * gs]);
  }
}

// dZ into the compact `dz` (skipped when `write` is false: dz is g itself), rows spread
// over the threads; with `colsum`, also dZ's sums over every dim but the last, in double.
void dz_pass(const View& g, const View* src, const DzRule& rule, const View& dz, bool write, double* colsum) {
  const int r = dz.rank();
  int64_t rows = 1;
  for (int i = 0; i + 1 < r; ++i) rows *= dz.shape[i];
  const int64_t n = dz.shape[r - 1];
  const int nthr = rows * n > (1 << 15) ? omp_get_max_threads() : 1;
  std::vector<double> partial(colsum ? size_t(nthr) * size_t(n) : 0, 0.0);
#pragma omp parallel num_threads(nthr)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* acc = colsum ? partial.data() + size_t(t) * size_t(n) : nullptr;
    const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
    for (int64_t i = begin; i < end; ++i) {
      int64_t rem = i, og = 0, os = 0;
      for (int d = r - 2; d >= 0; --d) {
        const int64_t idx = rem % dz.shape[d];
        rem /= dz.shape[d];
        og += idx * g.strides[d];
        if (src) os += idx * src->strides[d];
      }
      float* zp = dz.data + i * n;
      if (write)
        dz_row(rule, zp, g.data + og, g.strides[r - 1], src ? src->data + os : nullptr, src ? src->strides[r - 1] : 0,
               n);
      if (acc) loops::accumulate(acc, zp, n);
    }
  }
  if (colsum) {
    for (int64_t j = 0; j < n; ++j) colsum[j] = 0.0;
    for (int t = 0; t < nthr; ++t)
      for (int64_t j = 0; j < n; ++j) colsum[j] += partial[size_t(t) * size_t(n) + size_t(j)];
  }
}

// How a gradient of shape t (aligned) is reduced from dZ of `shape`.
enum class RedKind { kFull, kColsum, kOther };
RedKind red_kind(const View& t, const std::vector<int64_t>& shape) {
  const int r = int(shape.size());
  bool colsum = t.shape[r - 1] == shape[r - 1], full = true;
  for (int i = 0; i < r; ++i) {
    if (i < r - 1 && t.shape[i] != 1 && shape[i] != 1) colsum = false;
    if (t.shape[i] != shape[i]) full = false;
  }
  return full ? RedKind::kFull : colsum ? RedKind::kColsum : RedKind::kOther;
}

// dst = scale * src (compact src), through dst's strides.
void store_scaled(const View& src, const View& dst, double scale) {
  if (is_compact(dst)) {  // one parallel pass, no temporary (the common full-shape gradient)
    const int64_t total = src.numel(), chunk = int64_t(1) << 16;
#pragma omp parallel for schedule(static) if (total > (int64_t(1) << 15))
    for (int64_t b = 0; b < total; b += chunk) {
      const int64_t len = std::min(chunk, total - b);
      if (scale == 1.0)
        std::memcpy(dst.data + b, src.data + b, size_t(len) * sizeof(float));
      else
        loops::scale(dst.data + b, src.data + b, float(scale), len);
    }
    return;
  }
  if (scale == 1.0) return copy_view(src, dst);
  Buffer tmp;
  View c = compact_view(tmp, src.shape);
  loops::scale(c.data, src.data, float(scale), src.numel());
  copy_view(c, dst);
}

// t = scale * reduce_to(dz, t's shape) with a oneDNN reduction primitive (sum). A sum to
// one value is done here in float64 instead: oneDNN sums in float32, which over millions
// of elements drifts by 1e-4 relative.
void reduce_sum(State& st, const View& dz, const View& t, double scale) {
  if (t.numel() == 1 && is_compact(dz)) {
    const int64_t total = dz.numel(), chunk = int64_t(1) << 16;
    double s = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : s) if (total > (int64_t(1) << 15))
    for (int64_t b = 0; b < total; b += chunk) s += loops::sum(dz.data + b, std::min(chunk, total - b));
    t.data[0] = float(s * scale);
    return;
  }
  Buffer tmp;
  View dst = compact_view(tmp, t.shape);
  Key key{kReduction};
  key_add(key, dz);
  key_add(key, dst);
  auto p = st.get<dnnl::reduction>(key, [&] {
    dnnl::reduction::desc d(dnnl::algorithm::reduction_sum, md_of(dz), md_of(dst), 0.f, 0.f);
    return dnnl::reduction::primitive_desc(d, base_attr(), st.engine);
  });
  execute(st, *p, {{DNNL_ARG_SRC, mem(st, md_of(dz), dz.data)}, {DNNL_ARG_DST, mem(st, md_of(dst), dst.data)}});
  store_scaled(dst, t, scale);
}

}  // namespace

View dz_and_reductions(State& st, const View& g, const View* src, DzRule rule, const std::vector<Reduction>& reductions,
                       Buffer& buf) {
  const int r = g.rank();
  if (r < 1) throw Error(DLFUSE_STATUS_INTERNAL, "dz_and_reductions wants rank >= 1");
  if (!src && rule.act != DLFUSE_ACT_IDENTITY) throw Error(DLFUSE_STATUS_INTERNAL, "dZ of an activation needs src");
  // dZ = grad_out needs no copy when grad_out is already compact.
  const bool write = !(rule.act == DLFUSE_ACT_IDENTITY && is_compact(g));
  // A gradient of shape [..1.., N] is summed in the dZ pass itself (double accumulators);
  // every such gradient shares the one set of sums.
  std::vector<View> targets;
  std::vector<RedKind> kinds;
  bool colsum = false;
  int direct = -1;  // a compact full-shape gradient of scale 1: dZ is written straight into it
  for (const Reduction& red : reductions) {
    targets.push_back(aligned(*red.t, r));
    kinds.push_back(red_kind(targets.back(), g.shape));
    colsum = colsum || (kinds.back() == RedKind::kColsum && red.t->numel() > 0);
    if (direct < 0 && write && kinds.back() == RedKind::kFull && red.scale == 1.0 && is_compact(targets.back()) &&
        red.t->numel() > 0)
      direct = int(targets.size()) - 1;
  }
  // Without such a gradient, dZ goes to `buf` (a fresh buffer would cost a page fault per
  // 4 KiB on every call of a large backward).
  const View dz = !write ? g : direct >= 0 ? targets[size_t(direct)] : compact_view(buf, g.shape);
  const int64_t n = g.shape[r - 1];
  std::vector<double> sums(colsum ? size_t(n) : 0);
  const bool empty = dz.numel() == 0;
  if (!empty && write && dz_eltwise(st, g, src, rule, dz)) {
    if (colsum) dz_pass(dz, nullptr, DzRule{}, dz, false, sums.data());  // the sums alone
  } else if (!empty && (write || colsum)) {
    dz_pass(g, src, rule, dz, write, colsum ? sums.data() : nullptr);
  }
  for (size_t k = 0; k < reductions.size(); ++k) {
    const View& t = targets[k];
    const double scale = reductions[k].scale;
    if (t.numel() == 0 || int(k) == direct) continue;
    if (empty) {
      fill_view(t, 0.f);
    } else if (kinds[k] == RedKind::kFull) {
      store_scaled(dz, t, scale);
    } else if (kinds[k] == RedKind::kColsum) {
      const int64_t sn = t.strides[r - 1];
      for (int64_t j = 0; j < n; ++j) t.data[j * sn] = float(sums[size_t(j)] * scale);
    } else {
      reduce_sum(st, dz, t, scale);
    }
  }
  return dz;
}

void activation_pass(const View& src, const View& dst, int act) {
  if (dst.numel() == 0) return;
  if (act == DLFUSE_ACT_IDENTITY) {
    if (src.data != dst.data) copy_view(src, dst);
    return;
  }
  const int r = dst.rank();
  if (r == 0) {
    dst.data[0] = act_fwd(act, src.data[0]);
    return;
  }
  int64_t rows = 1;
  for (int i = 0; i + 1 < r; ++i) rows *= dst.shape[i];
  const int64_t n = dst.shape[r - 1], ss = src.strides[r - 1], ds = dst.strides[r - 1];
#pragma omp parallel for schedule(static) if (rows * n > (1 << 14))
  for (int64_t i = 0; i < rows; ++i) {
    int64_t rem = i, os = 0, od = 0;
    for (int d = r - 2; d >= 0; --d) {
      const int64_t idx = rem % dst.shape[d];
      rem /= dst.shape[d];
      os += idx * src.strides[d];
      od += idx * dst.strides[d];
    }
    const float* sp = src.data + os;
    float* dp = dst.data + od;
    if (act == DLFUSE_ACT_RELU && ss == 1 && ds == 1) {
      if (sp != dp) std::memcpy(dp, sp, size_t(n) * sizeof(float));
      loops::relu_inplace(dp, n);
    } else {
      for (int64_t j = 0; j < n; ++j) dp[j * ds] = act_fwd(act, sp[j * ss]);
    }
  }
}

}  // namespace dlfuse_onednn
