// matmul_add_relu forward and backward on oneDNN matmul primitives.
//  forward : one matmul primitive, bias as its bias argument (or a binary-add post-op for
//            bias shapes the bias argument's fast path does not take), relu as post-ops.
//  backward: one fused pass dZ = select(out > 0 or NaN, grad_out, 0) (+ grad_bias column
//            sums), then matmuls on transposed memory descriptors (no copies), batch dims
//            an input was broadcast along reduced with the matmul's sum post-op.
#include <omp.h>

#include <cmath>

#include "common.h"
#include "loops.h"

namespace dlfuse_onednn {
namespace {

using dnnl::memory;

enum KeyKind : int64_t { kMatmul = 1, kReduction = 2 };
enum BiasMode : int64_t { kNoBias = 0, kBiasArg = 1, kBiasPostOp = 2 };

View swap_last2(View v) {
  const int r = v.rank();
  std::swap(v.shape[r - 1], v.shape[r - 2]);
  std::swap(v.strides[r - 1], v.strides[r - 2]);
  return v;
}

// A broadcast view (stride 0 along a dim of size > 1) of a batch dim is the same as a dim
// of size 1, which oneDNN's matmul broadcasts itself.
View debroadcast_batch(View v) {
  for (int i = 0; i + 2 < v.rank(); ++i)
    if (v.strides[i] == 0 && v.shape[i] > 1) v.shape[i] = 1;
  return v;
}

// oneDNN's fast matmul wants each matrix row- or column-major (one inner stride 1, the
// other not 0). Anything else (a broadcast row or column, a doubly strided view) is copied
// to a compact buffer, which is the one case this plugin copies an input.
bool matrix_ok(const View& v) {
  const int r = v.rank();
  const int64_t rows = v.shape[r - 2], cols = v.shape[r - 1], sr = v.strides[r - 2], sc = v.strides[r - 1];
  if ((rows > 1 && sr == 0) || (cols > 1 && sc == 0)) return false;
  return sc == 1 || sr == 1 || rows == 1 || cols == 1;
}

View materialize(const View& v, Buffer& buf) {
  View c = compact_view(buf, v.shape);
  copy_view(v, c);
  return c;
}

// dst (+)= relu?(src @ wei + bias), with dst's batch dims of size 1 summed over.
struct Mm {
  View src, wei, dst;  // same rank; src [.., M, K], wei [.., K, N], dst [.., M, N]
  View bias;           // same rank as dst, dims 1 where broadcast; used when has_bias
  bool has_bias = false;
  bool relu = false;
};

std::shared_ptr<const CachedPrimitive> matmul_primitive(State& st, const View& src, const View& wei, const View& dst,
                                                        const View* bias, BiasMode mode, bool relu, bool sum) {
  Key key{kMatmul, int64_t(mode), relu, sum};
  key_add(key, src);
  key_add(key, wei);
  key_add(key, dst);
  if (mode != kNoBias) key_add(key, *bias);
  return st.get<dnnl::matmul>(key, [&] {
    dnnl::post_ops po;
    if (sum) po.append_sum(1.f);
    if (mode == kBiasPostOp) po.append_binary(dnnl::algorithm::binary_add, md_of(*bias));
    if (relu) append_relu_keep_nan(po);
    dnnl::primitive_attr attr = base_attr();
    attr.set_post_ops(po);
    const dnnl::matmul::desc d = mode == kBiasArg ? dnnl::matmul::desc(md_of(src), md_of(wei), md_of(*bias), md_of(dst))
                                                  : dnnl::matmul::desc(md_of(src), md_of(wei), md_of(dst));
    return dnnl::matmul::primitive_desc(d, attr, st.engine);
  });
}

void exec_matmul(State& st, const std::shared_ptr<const CachedPrimitive>& p, const View& src, const View& wei,
                 const View& dst, const View* bias, BiasMode mode, bool sum) {
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(st, md_of(src), src.data)},
                                       {DNNL_ARG_WEIGHTS, mem(st, md_of(wei), wei.data)},
                                       {DNNL_ARG_DST, mem(st, md_of(dst), dst.data)}};
  if (mode == kBiasArg) args[DNNL_ARG_BIAS] = mem(st, md_of(*bias), bias->data);
  if (mode == kBiasPostOp)
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(sum ? 1 : 0) | DNNL_ARG_SRC_1] = mem(st, md_of(*bias), bias->data);
  execute(st, *p, std::move(args));
}

// True for a bias that is a row vector over N (or a scalar): the matmul's bias argument,
// which oneDNN's gemm path fuses.
bool row_bias(const View& bias) {
  for (int i = 0; i + 1 < bias.rank(); ++i)
    if (bias.shape[i] != 1) return false;
  return true;
}

// True where the bias goes in as a binary-add post-op. oneDNN 2.6.3's binary post-op in
// its gemm matmul finds the src1 element from the dst element's offset as if src1 and dst
// were dense row-major: a strided src1 (a padded [M, 1] bias; a bias transposed along with
// a column-major output) and, for a per-batch row bias [B, 1, N], a padded dst give wrong
// sums (conformance sweep, seeds 1 and 12). A post-op bias is therefore always given
// compact, and run_matmul gives it a compact dst (a temporary where the output is strided).
bool post_op_bias(const View* bias) { return bias && !row_bias(*bias); }

// Runs dst = relu?(src @ wei + bias) once. The bias goes in as the bias argument when it
// is a row vector, else as a binary-add post-op over its broadcast descriptor (dst must
// be compact then, see post_op_bias); where oneDNN has only its reference matmul for that
// broadcast (an [M, 1] bias, say), the bias is expanded to dst's shape once, which the
// gemm path takes.
void matmul_once(State& st, const View& src, const View& wei, const View& dst, const View* bias_in, bool relu) {
  if (!bias_in) return exec_matmul(st, matmul_primitive(st, src, wei, dst, nullptr, kNoBias, relu, false), src, wei,
                                   dst, nullptr, kNoBias, false);
  Buffer bias_buf;
  const View* bias = bias_in;
  View compact_bias;
  const int r = dst.rank();
  // The bias argument wants its N elements contiguous; the post-op wants it all compact.
  const bool row = row_bias(*bias);
  if (row ? (bias->shape[r - 1] > 1 && bias->strides[r - 1] != 1) : !is_compact(*bias)) {
    compact_bias = materialize(*bias, bias_buf);
    bias = &compact_bias;
  }
  if (row)
    return exec_matmul(st, matmul_primitive(st, src, wei, dst, bias, kBiasArg, relu, false), src, wei, dst, bias,
                       kBiasArg, false);
  if (!is_compact(dst)) throw Error(DLFUSE_STATUS_INTERNAL, "a post-op bias needs a compact dst");
  auto p = matmul_primitive(st, src, wei, dst, bias, kBiasPostOp, relu, false);
  if (p->impl.rfind("ref", 0) != 0 || bias->shape == dst.shape)
    return exec_matmul(st, p, src, wei, dst, bias, kBiasPostOp, false);
  Buffer expanded;
  View full = *bias;
  for (int i = 0; i < full.rank(); ++i)
    if (full.shape[i] == 1 && dst.shape[i] != 1) {
      full.shape[i] = dst.shape[i];
      full.strides[i] = 0;
    }
  View e = compact_view(expanded, dst.shape);
  copy_view(full, e);
  exec_matmul(st, matmul_primitive(st, src, wei, dst, &e, kBiasPostOp, relu, false), src, wei, dst, &e, kBiasPostOp,
              false);
}

void run_matmul(State& st, Mm m) {
  const int r = m.dst.rank();
  if (m.dst.numel() == 0) return;
  // A column-major destination: compute dst^T = wei^T @ src^T (+ bias^T), whose rows are
  // contiguous.
  if (m.dst.strides[r - 1] != 1 && m.dst.strides[r - 2] == 1 && m.dst.shape[r - 1] > 1) {
    View s = swap_last2(m.wei), w = swap_last2(m.src);
    m.src = s;
    m.wei = w;
    m.dst = swap_last2(m.dst);
    if (m.has_bias) m.bias = swap_last2(m.bias);
  }
  const View* bias = m.has_bias ? &m.bias : nullptr;
  Buffer tmp_dst, tmp_src, tmp_wei, tmp_batch;
  View out = m.dst;
  const bool dst_ok = out.strides[r - 1] == 1 || out.shape[r - 1] == 1;
  if (!dst_ok || (m.dst.shape[r - 2] > 1 && m.dst.strides[r - 2] == 0) || (post_op_bias(bias) && !is_compact(out)))
    out = compact_view(tmp_dst, m.dst.shape);
  m.src = debroadcast_batch(m.src);
  m.wei = debroadcast_batch(m.wei);
  if (!matrix_ok(m.src)) m.src = materialize(m.src, tmp_src);
  if (!matrix_ok(m.wei)) m.wei = materialize(m.wei, tmp_wei);
  // oneDNN's matmul broadcasts a batch dim of size 1 only against the other operand's: a
  // dst batch dim that both operands were broadcast along (stride 0, now size 1) has no
  // source. The smaller operand is materialized along such dims.
  {
    const bool src_smaller = m.src.shape[r - 2] <= m.wei.shape[r - 1];  // M x K vs K x N
    View& grow = src_smaller ? m.src : m.wei;
    bool any = false;
    for (int i = 0; i + 2 < r; ++i)
      if (out.shape[i] > 1 && m.src.shape[i] == 1 && m.wei.shape[i] == 1) {
        grow.shape[i] = out.shape[i];
        grow.strides[i] = 0;
        any = true;
      }
    if (any) grow = materialize(grow, tmp_batch);
  }

  // The batch dims the destination sums over: size 1 in dst, larger in an operand.
  std::vector<int> reduced;
  int64_t combos = 1;
  for (int i = 0; i + 2 < r; ++i) {
    const int64_t full = std::max(m.src.shape[i], m.wei.shape[i]);
    if (out.shape[i] == 1 && full != 1) {
      reduced.push_back(i);
      combos *= full;
    }
  }
  const int64_t K = m.src.shape[r - 1];
  if (K == 0 || combos == 0) {  // an empty sum
    fill_view(out, 0.f);
  } else if (reduced.empty()) {
    matmul_once(st, m.src, m.wei, out, bias, m.relu);
  } else {
    View s = m.src, w = m.wei;
    for (int d : reduced) {
      s.shape[d] = 1;
      w.shape[d] = 1;
    }
    for (int64_t c = 0; c < combos; ++c) {
      int64_t rem = c, os = 0, ow = 0;
      for (int j = int(reduced.size()) - 1; j >= 0; --j) {
        const int d = reduced[size_t(j)];
        const int64_t full = std::max(m.src.shape[d], m.wei.shape[d]), idx = rem % full;
        rem /= full;
        if (m.src.shape[d] > 1) os += idx * m.src.strides[d];
        if (m.wei.shape[d] > 1) ow += idx * m.wei.strides[d];
      }
      View sc = s, wc = w;
      sc.data = m.src.data + os;
      wc.data = m.wei.data + ow;
      if (bias || m.relu) throw Error(DLFUSE_STATUS_INTERNAL, "a summed matmul takes no bias or relu");
      exec_matmul(st, matmul_primitive(st, sc, wc, out, nullptr, kNoBias, false, c > 0), sc, wc, out, nullptr, kNoBias,
                  c > 0);
    }
  }
  if (out.data != m.dst.data) copy_view(out, m.dst);
}

// The bias view for a forward call: aligned to the output's rank, broadcast dims size 1.
View bias_view(const View& bias, int rank) {
  View b = aligned(bias, rank);
  for (int i = 0; i < rank; ++i)
    if (b.strides[i] == 0 && b.shape[i] > 1) b.shape[i] = 1;
  return b;
}

void forward_f32(State& st, const View& a, const View& b, const View& bias, const View& out) {
  const int r = out.rank();
  if (out.numel() == 0) return;
  View bv = bias_view(bias, r);
  if (a.shape[a.rank() - 1] == 0) {  // K = 0: out = relu(bias), broadcast
    View full = bv;
    for (int i = 0; i < r; ++i)
      if (full.shape[i] == 1) {
        full.shape[i] = out.shape[i];
        full.strides[i] = 0;
      }
    Buffer tmp;
    View c = compact_view(tmp, out.shape);
    copy_view(full, c);
    float* p = c.data;
    for (int64_t i = 0, e = c.numel(); i < e; ++i) p[i] = p[i] <= 0.f ? 0.f : p[i];  // NaN stays
    copy_view(c, out);
    return;
  }
  Mm m;
  m.src = aligned(a, r);
  m.wei = aligned(b, r);
  m.dst = out;
  m.bias = bv;
  m.has_bias = true;
  m.relu = true;
  run_matmul(st, m);
}

// dZ = where(out > 0 or isnan(out), grad_out, 0) into a compact buffer, one pass;
// with `colsum`, also the sums of dZ over every dim but the last (grad_bias of shape [N]).
void relu_select(const View& g, const View& o, const View& dz, double* colsum) {
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
      int64_t rem = i, og = 0, oo = 0;
      for (int d = r - 2; d >= 0; --d) {
        const int64_t idx = rem % dz.shape[d];
        rem /= dz.shape[d];
        og += idx * g.strides[d];
        oo += idx * o.strides[d];
      }
      const float* gp = g.data + og;
      const float* op = o.data + oo;
      float* zp = dz.data + i * n;
      const int64_t gs = g.strides[r - 1], os = o.strides[r - 1];
      if (gs == 1 && os == 1) {
        loops::relu_select(zp, op, gp, n);
      } else {
        for (int64_t j = 0; j < n; ++j) zp[j] = op[j * os] <= 0.f ? 0.f : gp[j * gs];
      }
      if (acc) loops::accumulate(acc, zp, n);
    }
  }
  if (colsum) {
    for (int64_t j = 0; j < n; ++j) colsum[j] = 0.0;
    for (int t = 0; t < nthr; ++t)
      for (int64_t j = 0; j < n; ++j) colsum[j] += partial[size_t(t) * size_t(n) + size_t(j)];
  }
}

// grad_bias = reduce_to(dZ, bias shape) with a oneDNN reduction primitive (sum).
void reduce_sum(State& st, const View& dz, const View& gbias_aligned) {
  Buffer tmp;
  View dst = compact_view(tmp, gbias_aligned.shape);
  Key key{kReduction};
  key_add(key, dz);
  key_add(key, dst);
  auto p = st.get<dnnl::reduction>(key, [&] {
    dnnl::reduction::desc d(dnnl::algorithm::reduction_sum, md_of(dz), md_of(dst), 0.f, 0.f);
    return dnnl::reduction::primitive_desc(d, base_attr(), st.engine);
  });
  execute(st, *p, {{DNNL_ARG_SRC, mem(st, md_of(dz), dz.data)}, {DNNL_ARG_DST, mem(st, md_of(dst), dst.data)}});
  copy_view(dst, gbias_aligned);
}

void backward_f32(State& st, const View& g, const View& a, const View& b, const View& o, const View* ga,
                  const View* gb, const View* gbias) {
  const int r = o.rank();
  Buffer dz_buf;
  View dz = compact_view(dz_buf, o.shape);
  // grad_bias of shape [..1.., N]: summed in the same pass as dZ (double accumulators).
  View gbv;
  bool colsum = false, full = false;
  if (gbias) {
    gbv = aligned(*gbias, r);
    colsum = gbv.shape[r - 1] == o.shape[r - 1];
    full = true;
    for (int i = 0; i < r; ++i) {
      if (i < r - 1 && gbv.shape[i] != 1 && o.shape[i] != 1) colsum = false;
      if (gbv.shape[i] != o.shape[i]) full = false;
    }
    if (full) colsum = false;
  }
  std::vector<double> sums(colsum ? size_t(o.shape[r - 1]) : 0);
  if (dz.numel() > 0) relu_select(g, o, dz, colsum ? sums.data() : nullptr);
  if (gbias && gbias->numel() > 0) {
    if (dz.numel() == 0) {
      fill_view(*gbias, 0.f);
    } else if (full) {
      copy_view(dz, gbv);
    } else if (colsum) {
      const int64_t n = o.shape[r - 1], sn = gbv.strides[r - 1];
      for (int64_t j = 0; j < n; ++j) gbv.data[j * sn] = float(sums[size_t(j)]);
    } else {
      reduce_sum(st, dz, gbv);
    }
  }
  if (ga && ga->numel() > 0) {
    Mm m;
    m.src = dz;
    m.wei = swap_last2(aligned(b, r));
    m.dst = aligned(*ga, r);
    run_matmul(st, m);
  }
  if (gb && gb->numel() > 0) {
    Mm m;
    m.src = swap_last2(aligned(a, r));
    m.wei = dz;
    m.dst = aligned(*gb, r);
    run_matmul(st, m);
  }
}

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, 3, 1, true);
    State& st = *static_cast<State*>(state);
    const DLTensor* const* in = args->inputs;
    const Storage s = storage_of(in[0]->dtype);
    Buffer ba, bb, bbias, bout;
    const View a = input_f32(in[0], s, ba), b = input_f32(in[1], s, bb), bias = input_f32(in[2], s, bbias);
    const View out = output_f32(args->outputs[0], s, bout);
    forward_f32(st, a, b, bias, out);
    store_output(out, args->outputs[0], s);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, 4, 3, false);
    State& st = *static_cast<State*>(state);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    const Storage s = storage_of(in[0]->dtype);
    Buffer bg, ba, bb, bo, bga, bgb, bgbias;
    const View g = input_f32(in[0], s, bg), a = input_f32(in[1], s, ba), b = input_f32(in[2], s, bb),
               o = input_f32(in[3], s, bo);
    View ga, gb, gbias;
    if (out[0]) ga = output_f32(out[0], s, bga);
    if (out[1]) gb = output_f32(out[1], s, bgb);
    if (out[2]) gbias = output_f32(out[2], s, bgbias);
    backward_f32(st, g, a, b, o, out[0] ? &ga : nullptr, out[1] ? &gb : nullptr, out[2] ? &gbias : nullptr);
    if (out[0]) store_output(ga, out[0], s);
    if (out[1]) store_output(gb, out[1], s);
    if (out[2]) store_output(gbias, out[2], s);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_onednn
