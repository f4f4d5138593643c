// matmul_add_relu, matmul_add_activation, matmul_add_residual and their backwards on
// oneDNN matmul primitives.
//  forward : one matmul primitive, bias as its bias argument (or a binary-add post-op for
//            bias shapes the bias argument's fast path does not take), the activation as
//            post-ops; a residual is first written into the destination and added by the
//            matmul's sum post-op (so out == residual, in place, costs nothing extra). When
//            `pre` is wanted the matmul writes pre and one pass computes out = act(pre).
//  backward: one fused pass dZ = grad_out * act'(pre or out) (+ grad_bias column sums,
//            grad.cpp), then matmuls on transposed memory descriptors (no copies), batch
//            dims an input was broadcast along reduced with the matmul's sum post-op.
#include <omp.h>

#include <cmath>

#include "activation.h"
#include "common.h"
#include "grad.h"
#include "loops.h"
#include "pointwise_avx512.h"

namespace dlfuse_onednn {
namespace {

using dnnl::memory;

enum KeyKind : int64_t { kMatmul = 1, kMatmulBf16 = 4 };  // grad.cpp uses 2 and 3
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

// dst = act(src @ wei + bias (+ dst when sum)), with dst's batch dims of size 1 summed over.
struct Mm {
  View src, wei, dst;  // same rank; src [.., M, K], wei [.., K, N], dst [.., M, N]
  View bias;           // same rank as dst, dims 1 where broadcast; used when has_bias
  bool has_bias = false;
  int act = DLFUSE_ACT_IDENTITY;  // applied as post-ops
  bool sum = false;               // add dst's previous contents (a residual written there)
};

std::shared_ptr<const CachedPrimitive> matmul_primitive(State& st, const View& src, const View& wei, const View& dst,
                                                        const View* bias, BiasMode mode, int act, bool sum) {
  Key key{kMatmul, int64_t(mode), act, sum};
  key_add(key, src);
  key_add(key, wei);
  key_add(key, dst);
  if (mode != kNoBias) key_add(key, *bias);
  return st.get<dnnl::matmul>(key, [&] {
    dnnl::post_ops po;
    if (sum) po.append_sum(1.f);
    if (mode == kBiasPostOp) po.append_binary(dnnl::algorithm::binary_add, md_of(*bias));
    append_activation(po, act);
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

// Runs dst = act(src @ wei + bias (+ dst when sum)) once. The bias goes in as the bias argument when it
// is a row vector, else as a binary-add post-op over its broadcast descriptor (dst must
// be compact then, see post_op_bias); where oneDNN has only its reference matmul for that
// broadcast (an [M, 1] bias, say), the bias is expanded to dst's shape once, which the
// gemm path takes.
void matmul_once(State& st, const View& src, const View& wei, const View& dst, const View* bias_in, int act, bool sum) {
  if (!bias_in)
    return exec_matmul(st, matmul_primitive(st, src, wei, dst, nullptr, kNoBias, act, sum), src, wei, dst, nullptr,
                       kNoBias, sum);
  Buffer bias_buf;
  const View* bias = bias_in;
  View compact_bias;
  const int r = dst.rank();
  // The bias argument wants its N elements contiguous; the post-op wants it all compact.
  const bool row = row_bias(*bias);
  if (row && bias->shape[r - 1] == 1 && dst.shape[r - 1] > 1) {
    // A scalar bias: oneDNN 2.6.3's gemm matmul takes a bias over N only and falls to its
    // reference matmul for a [1, 1] bias (measured 7.1 s against 20 ms at 512^3), so the
    // scalar is spread over a row of N.
    View row_v = *bias;
    row_v.shape[r - 1] = dst.shape[r - 1];
    row_v.strides[r - 1] = 0;
    compact_bias = materialize(row_v, bias_buf);
    bias = &compact_bias;
  } else if (row ? (bias->shape[r - 1] > 1 && bias->strides[r - 1] != 1) : !is_compact(*bias)) {
    compact_bias = materialize(*bias, bias_buf);
    bias = &compact_bias;
  }
  if (row)
    return exec_matmul(st, matmul_primitive(st, src, wei, dst, bias, kBiasArg, act, sum), src, wei, dst, bias, kBiasArg,
                       sum);
  if (!is_compact(dst)) throw Error(DLFUSE_STATUS_INTERNAL, "a post-op bias needs a compact dst");
  auto p = matmul_primitive(st, src, wei, dst, bias, kBiasPostOp, act, sum);
  if (p->impl.rfind("ref", 0) != 0 || bias->shape == dst.shape)
    return exec_matmul(st, p, src, wei, dst, bias, kBiasPostOp, sum);
  Buffer expanded;
  View full = *bias;
  for (int i = 0; i < full.rank(); ++i)
    if (full.shape[i] == 1 && dst.shape[i] != 1) {
      full.shape[i] = dst.shape[i];
      full.strides[i] = 0;
    }
  View e = compact_view(expanded, dst.shape);
  copy_view(full, e);
  exec_matmul(st, matmul_primitive(st, src, wei, dst, &e, kBiasPostOp, act, sum), src, wei, dst, &e, kBiasPostOp, sum);
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
  if (m.sum && out.data != m.dst.data) copy_view(m.dst, out);  // the temporary starts from dst too
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
    if (bias || m.act != DLFUSE_ACT_IDENTITY)
      throw Error(DLFUSE_STATUS_INTERNAL, "K = 0 reached run_matmul with a bias");
    if (!m.sum) fill_view(out, 0.f);
  } else if (reduced.empty()) {
    matmul_once(st, m.src, m.wei, out, bias, m.act, m.sum);
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
      if (bias || m.act != DLFUSE_ACT_IDENTITY)
        throw Error(DLFUSE_STATUS_INTERNAL, "a summed matmul takes no bias or act");
      const bool sum = c > 0 || m.sum;
      exec_matmul(st, matmul_primitive(st, sc, wc, out, nullptr, kNoBias, DLFUSE_ACT_IDENTITY, sum), sc, wc, out,
                  nullptr, kNoBias, sum);
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

// v (aligned to shape's rank, dims 1 or stride 0 where broadcast) as a view of `shape`.
View broadcast_to(View v, const std::vector<int64_t>& shape) {
  for (int i = 0; i < v.rank(); ++i)
    if (v.shape[i] == 1 && shape[size_t(i)] != 1) {
      v.shape[i] = shape[size_t(i)];
      v.strides[i] = 0;
    }
  return v;
}

bool same_view(const View& x, const View& y) {
  return x.data == y.data && x.shape == y.shape && x.strides == y.strides;
}

// What a forward call computes besides a @ b + bias.
struct Epilogue {
  int act = DLFUSE_ACT_RELU;
  const View* residual = nullptr;  // added before the activation (matmul_add_residual)
  const View* pre = nullptr;       // written with the value before the activation
};

// K = 0: pre = bias (+ residual), broadcast; out = act(pre). No matmul.
void forward_k0(const View& bias, const View& out, const Epilogue& e) {
  const int r = out.rank();
  Buffer tmp, tmp_res;
  View c = compact_view(tmp, out.shape);
  copy_view(broadcast_to(bias, out.shape), c);
  if (e.residual) {
    View res = compact_view(tmp_res, out.shape);
    copy_view(broadcast_to(aligned(*e.residual, r), out.shape), res);
    for (int64_t i = 0, n = c.numel(); i < n; ++i) c.data[i] += res.data[i];
  }
  if (e.pre) copy_view(c, *e.pre);
  activation_pass(c, c, e.act);
  copy_view(c, out);
}

void forward_f32(State& st, const View& a, const View& b, const View& bias, const View& out, const Epilogue& e) {
  const int r = out.rank();
  if (out.numel() == 0) return;
  const View bv = bias_view(bias, r);
  if (a.shape[a.rank() - 1] == 0) return forward_k0(bv, out, e);
  // The matmul writes pre when it is wanted (act then runs as a pass), else out directly
  // with the activation as post-ops.
  Mm m;
  m.src = aligned(a, r);
  m.wei = aligned(b, r);
  m.dst = e.pre ? *e.pre : out;
  m.bias = bv;
  m.has_bias = true;
  m.act = e.pre ? DLFUSE_ACT_IDENTITY : e.act;
  if (e.residual) {  // the residual goes into dst first, the sum post-op adds the product
    const View res = aligned(*e.residual, r);
    if (!same_view(res, m.dst)) copy_view(broadcast_to(res, m.dst.shape), m.dst);
    m.sum = true;
  }
  run_matmul(st, m);
  if (e.pre) activation_pass(*e.pre, out, e.act);
}

// dZ (and the reductions named in `reductions`), then grad_a = dZ @ b^T, grad_b = a^T @ dZ,
// each summed over the batch dims its operand was broadcast along.
void backward_f32(State& st, const View& g, const View& a, const View& b, const View* src, DzRule rule, const View* ga,
                  const View* gb, const std::vector<Reduction>& reductions) {
  const int r = g.rank();
  Buffer dz_buf;
  const View dz = dz_and_reductions(st, g, src, rule, reductions, dz_buf);
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

// out = act(a @ b + bias) on bfloat16 tensors as they are, with oneDNN's bf16 matmul
// (bf16 products accumulated in float32, the bias and post-ops applied in float32, one
// rounding to bf16 at the end, as docs/ops.md asks). Used on CPUs with avx512_bf16, where
// oneDNN's brgemm kernel multiplies bf16 natively at about twice the float32 rate and no
// float32 copies are made; false (nothing written) for layouts it does not take: batch
// dims broadcast, a strided output, a bias that is not a row over N.
bool forward_bf16_native(State& st, const DLTensor* at, const DLTensor* bt, const DLTensor* biast, DLTensor* outt,
                         int act) {
  if (!avx512::native_bf16()) return false;
  const View a = view_of(at), b = view_of(bt), out = view_of(outt);
  const int r = out.rank();
  if (r < 2 || a.rank() != r || b.rank() != r || out.numel() == 0 || a.shape[r - 1] == 0) return false;
  for (int i = 0; i + 2 < r; ++i)
    if (a.shape[i] != out.shape[i] || b.shape[i] != out.shape[i]) return false;
  if (!is_compact(out) || !matrix_ok(a) || !matrix_ok(b)) return false;
  const View bias = aligned(view_of(biast), r);
  if (!row_bias(bias) || bias.shape[r - 1] != out.shape[r - 1] || (bias.shape[r - 1] > 1 && bias.strides[r - 1] != 1))
    return false;
  const auto bf16 = memory::data_type::bf16;
  Key key{kMatmulBf16, act};
  key_add(key, a);
  key_add(key, b);
  key_add(key, out);
  key_add(key, bias);
  auto p = st.get<dnnl::matmul>(key, [&] {
    dnnl::post_ops po;
    append_activation(po, act);
    dnnl::primitive_attr attr = base_attr();
    attr.set_post_ops(po);
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(md_of(a, bf16), md_of(b, bf16), md_of(bias, bf16), md_of(out, bf16)), attr, st.engine);
  });
  execute(st, *p,
          {{DNNL_ARG_SRC, mem(st, md_of(a, bf16), a.data)},
           {DNNL_ARG_WEIGHTS, mem(st, md_of(b, bf16), b.data)},
           {DNNL_ARG_BIAS, mem(st, md_of(bias, bf16), bias.data)},
           {DNNL_ARG_DST, mem(st, md_of(out, bf16), out.data)}});
  return true;
}

// A forward kernel's call: inputs a, b, bias (, residual); outputs out (, pre). Converts
// bf16/f16 to float32 and back around forward_f32 (bf16 without residual and pre runs
// natively where it can).
void forward_call(State& st, const dlfuse_kernel_args_t* args, int act, bool has_residual) {
  const DLTensor* const* in = args->inputs;
  DLTensor* const* outs = args->outputs;
  const Storage s = storage_of(in[0]->dtype);
  const bool wants_pre = args->num_outputs > 1 && outs[1];
  if (s == Storage::kBF16 && !has_residual && !wants_pre && forward_bf16_native(st, in[0], in[1], in[2], outs[0], act))
    return;
  Buffer ba, bb, bbias, bres, bout, bpre;
  const View a = input_f32(in[0], s, ba), b = input_f32(in[1], s, bb), bias = input_f32(in[2], s, bbias);
  View res, pre;
  if (has_residual) res = input_f32(in[3], s, bres);  // converted before out is written: in place is safe
  const View out = output_f32(outs[0], s, bout);
  const bool has_pre = args->num_outputs > 1 && outs[1];
  if (has_pre) pre = output_f32(outs[1], s, bpre);
  Epilogue e;
  e.act = act;
  e.residual = has_residual ? &res : nullptr;
  e.pre = has_pre ? &pre : nullptr;
  forward_f32(st, a, b, bias, out, e);
  store_output(out, outs[0], s);
  if (has_pre) store_output(pre, outs[1], s);
}

// A backward kernel's call: inputs grad_out, a, b; `src` (pre or out, or NULL); outputs
// grad_a, grad_b, then the reductions of dZ (grad_bias, grad_residual).
void backward_call(State& st, const dlfuse_kernel_args_t* args, const DLTensor* src_t, DzRule rule) {
  const DLTensor* const* in = args->inputs;
  DLTensor* const* outs = args->outputs;
  const Storage s = storage_of(in[0]->dtype);
  const int nout = args->num_outputs;
  Buffer bg, ba, bb, bsrc;
  std::vector<Buffer> bouts(static_cast<size_t>(nout));
  const View g = input_f32(in[0], s, bg), a = input_f32(in[1], s, ba), b = input_f32(in[2], s, bb);
  View src;
  if (src_t) src = input_f32(src_t, s, bsrc);
  std::vector<View> gr(static_cast<size_t>(nout));
  for (int k = 0; k < nout; ++k)
    if (outs[k]) gr[size_t(k)] = output_f32(outs[k], s, bouts[size_t(k)]);
  std::vector<Reduction> reductions;
  for (int k = 2; k < nout; ++k)
    if (outs[k]) reductions.push_back(Reduction{&gr[size_t(k)], 1.0});
  backward_f32(st, g, a, b, src_t ? &src : nullptr, rule, outs[0] ? &gr[0] : nullptr, outs[1] ? &gr[1] : nullptr,
               reductions);
  for (int k = 0; k < nout; ++k)
    if (outs[k]) store_output(gr[size_t(k)], outs[k], s);
}
}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_relu), true);
    forward_call(*static_cast<State*>(state), args, DLFUSE_ACT_RELU, false);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_relu_backward), false);
    backward_call(*static_cast<State*>(state), args, args->inputs[3], DzRule{DLFUSE_ACT_RELU, true});
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_activation), true);
    forward_call(*static_cast<State*>(state), args, kit::activation(args), false);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_activation_backward), false,
               DLFUSE_OPTIONAL_INPUTS(matmul_add_activation_backward));
    const int act = kit::activation(args);
    const DLTensor* out = args->inputs[3];
    const DLTensor* pre = args->inputs[4];
    if (!out == !pre) kit::invalid("out, pre", "exactly one of them", out ? "both" : "neither");
    if (out) check_act_from_out(act, "pass pre, which the forward writes");
    backward_call(*static_cast<State*>(state), args, out ? out : pre, DzRule{act, out != nullptr});
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_residual), true);
    forward_call(*static_cast<State*>(state), args, DLFUSE_ACT_IDENTITY, true);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(matmul_add_residual_backward), false);
    backward_call(*static_cast<State*>(state), args, nullptr, DzRule{DLFUSE_ACT_IDENTITY, false});
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_onednn
