// add_mul_activation forward and backward.
//  forward : one oneDNN binary primitive, dst = x + multiplier * y (scale on src1), with
//            post-ops binary-add(bias) and the activation's eltwise: one pass over memory.
//  backward: one tiled pass. Per tile (64 KiB, cache resident): pre = x + bias + m*y,
//            d_pre = oneDNN eltwise_backward(pre, grad_out) (relu and identity inline),
//            then grad_x, grad_y and grad_bias partial sums.
//  Layouts outside these fast paths (broadcast x or y, strided views) run a generic loop.
#include <omp.h>

#include <cmath>

#include "activation.h"
#include "add_mul_fast.h"
#include "common.h"
#include "grad.h"
#include "layout.h"
#include "loops.h"

namespace dlfuse_onednn {
namespace {

using dnnl::algorithm;
using dnnl::memory;

enum KeyKind : int64_t { kBinary = 10, kEltwiseBwd = 11 };

// ---- forward -----------------------------------------------------------------------------
void forward_generic(const View& x, const View& y, const View& bias, const View& out, int act, float mult) {
  const int r = out.rank();
  const View xa = aligned(x, r), ya = aligned(y, r), ba = aligned(bias, r);
  auto st = [](const View& v, int i) { return v.shape[i] == 1 ? int64_t(0) : v.strides[i]; };
  int64_t rows = 1;
  for (int i = 0; i + 1 < r; ++i) rows *= out.shape[i];
  const int64_t n = r ? out.shape[r - 1] : 1;
  const int64_t xs = r ? st(xa, r - 1) : 0, ys = r ? st(ya, r - 1) : 0, bs = r ? st(ba, r - 1) : 0,
                os = r ? out.strides[r - 1] : 0;
#pragma omp parallel for schedule(static) if (rows * n > (1 << 14))
  for (int64_t i = 0; i < rows; ++i) {
    int64_t rem = i, ox = 0, oy = 0, ob = 0, oo = 0;
    for (int d = r - 2; d >= 0; --d) {
      const int64_t idx = rem % out.shape[d];
      rem /= out.shape[d];
      ox += idx * st(xa, d);
      oy += idx * st(ya, d);
      ob += idx * st(ba, d);
      oo += idx * out.strides[d];
    }
    // In place (out == x) is safe: each x element is read before its own slot is written.
    for (int64_t j = 0; j < n; ++j) {
      const float pre = xa.data[ox + j * xs] + ba.data[ob + j * bs] + mult * ya.data[oy + j * ys];
      out.data[oo + j * os] = act_fwd(act, pre);
    }
  }
}

constexpr int64_t kTile = 16384;                     // elements per tile: 64 KiB per float stream, L2 resident
constexpr int64_t kStreamBytes = int64_t(16) << 20;  // outputs above this use streaming stores

// relu and identity: the plugin's own one-pass loop, tiles spread over the OpenMP threads.
// oneDNN's relu post-op maps NaN to 0 and the NaN-keeping elu+linear pair costs a exp per
// element (measured ~30% slower on 16384x8192, docs/performance.md); this loop reads x, y
// (and bias) once and writes out once, with streaming stores for large outputs.
bool forward_own(const View& x, const View& y, const View& bias, const View& out, int act, float mult) {
  const std::vector<int64_t>& shape = out.shape;
  const int r = out.rank();
  if (act != DLFUSE_ACT_RELU && act != DLFUSE_ACT_IDENTITY) return false;
  if (r == 0 || !is_compact(out) || !full_compact(x, shape) || !full_compact(y, shape)) return false;
  const BiasKind bk = bias_kind(bias, shape);
  if (bk == BiasKind::kOther) return false;
  const int64_t n = shape[r - 1], total = out.numel();
  const bool nt = total * int64_t(sizeof(float)) > kStreamBytes;
  const int64_t ntiles = (total + kTile - 1) / kTile;
  const int nthr = total > (1 << 15) ? omp_get_max_threads() : 1;
  // Every thread's tile buffer is allocated here: an exception (bad_alloc) must not leave
  // an OpenMP region, where it would terminate the process.
  Buffer bufs{nt ? size_t(nthr) * size_t(kTile) : 0};
#pragma omp parallel num_threads(nthr)
  {
    float* buf = bufs.get() + size_t(omp_get_thread_num()) * size_t(kTile);
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < ntiles; ++tile) {
      const int64_t e0 = tile * kTile, len = std::min(kTile, total - e0);
      // In place (out == x) is safe: a tile of x is read into buf before out is written.
      float* dst = nt ? buf : out.data + e0;
      for (int64_t s = 0; s < len;) {
        const int64_t col = (e0 + s) % n, seg = std::min(len - s, n - col);
        const float* bseg = bk == BiasKind::kRow      ? bias.data + col
                            : bk == BiasKind::kScalar ? bias.data
                                                      : bias.data + e0 + s;
        loops::add_mul(dst + s, x.data + e0 + s, bseg, bk == BiasKind::kScalar, y.data + e0 + s, mult, seg);
        s += seg;
      }
      if (act == DLFUSE_ACT_RELU) loops::relu_inplace(dst, len);
      if (nt) loops::stream_copy(out.data + e0, dst, len);
    }
    if (nt) loops::store_fence();
  }
  return true;
}

bool forward_onednn(State& st, const View& x, const View& y, const View& bias, const View& out, int act, float mult) {
  const std::vector<int64_t>& shape = out.shape;
  const int r = out.rank();
  if (r == 0 || !is_compact(out) || !full_compact(x, shape) || !full_compact(y, shape)) return false;
  const BiasKind bk = bias_kind(bias, shape);
  if (bk == BiasKind::kOther) return false;
  const int64_t n = shape[r - 1], rows = out.numel() / n;
  const View X{x.data, {rows, n}, {n, 1}}, Y{y.data, {rows, n}, {n, 1}}, O{out.data, {rows, n}, {n, 1}};
  View B{bias.data, {1, 1}, {1, 1}};
  if (bk == BiasKind::kRow) B = View{bias.data, {1, n}, {n, 1}};
  if (bk == BiasKind::kFull) B = View{bias.data, {rows, n}, {n, 1}};
  Key key{kBinary, act, int64_t(bk)};
  key_add(key, O);
  key_add(key, B);
  key_add_f(key, mult);
  auto p = st.get<dnnl::binary>(key, [&] {
    dnnl::primitive_attr attr = base_attr();
    if (mult != 1.f) attr.set_scales(DNNL_ARG_SRC_1, 0, {mult});
    dnnl::post_ops po;
    po.append_binary(algorithm::binary_add, md_of(B));
    append_activation(po, act);
    attr.set_post_ops(po);
    dnnl::binary::desc d(algorithm::binary_add, md_of(X), md_of(Y), md_of(O));
    return dnnl::binary::primitive_desc(d, attr, st.engine);
  });
  execute(st, *p,
          {{DNNL_ARG_SRC_0, mem(st, md_of(X), X.data)},
           {DNNL_ARG_SRC_1, mem(st, md_of(Y), Y.data)},
           {DNNL_ARG_DST, mem(st, md_of(O), O.data)},
           {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mem(st, md_of(B), B.data)}});
  return true;
}

// ---- backward ----------------------------------------------------------------------------
// Sums into float64 per element of each gradient's shape; one serial pass (small or odd
// layouts only).
void backward_generic(const View& g, const View& x, const View& y, const View& bias, const View* gx, const View* gy,
                      const View* gb, int act, float mult) {
  const int r = g.rank();
  const std::vector<int64_t>& shape = g.shape;
  const View xa = aligned(x, r), ya = aligned(y, r), ba = aligned(bias, r);
  struct Acc {
    const View* t;
    std::vector<double> sum;
    std::vector<int64_t> idx;  // compact strides over the grad's own shape, 0 where broadcast
  };
  auto make = [&](const View* t) {
    Acc a{t, {}, {}};
    if (!t) return a;
    const View al = aligned(*t, r);
    a.sum.assign(size_t(t->numel()), 0.0);
    const std::vector<int64_t> cs = compact_strides(al.shape);
    a.idx.resize(size_t(r));
    for (int i = 0; i < r; ++i) a.idx[size_t(i)] = al.shape[i] == 1 ? 0 : cs[size_t(i)];
    return a;
  };
  Acc ax = make(gx), ay = make(gy), ab = make(gb);
  auto off = [&](const View& v, const std::vector<int64_t>& i) {
    int64_t o = 0;
    for (int d = 0; d < r; ++d) o += v.shape[d] == 1 ? 0 : i[size_t(d)] * v.strides[d];
    return o;
  };
  std::vector<int64_t> i(size_t(r), 0);
  const int64_t total = g.numel();
  for (int64_t e = 0; e < total; ++e) {
    const float pre = xa.data[off(xa, i)] + ba.data[off(ba, i)] + mult * ya.data[off(ya, i)];
    const float d = act_bwd(act, pre, g.data[off(g, i)]);
    for (Acc* a : {&ax, &ay, &ab}) {
      if (!a->t) continue;
      int64_t o = 0;
      for (int k = 0; k < r; ++k) o += i[size_t(k)] * a->idx[size_t(k)];
      a->sum[size_t(o)] += a == &ay ? double(mult * d) : double(d);
    }
    for (int k = r - 1; k >= 0; --k) {
      if (++i[size_t(k)] < shape[k]) break;
      i[size_t(k)] = 0;
    }
  }
  for (Acc* a : {&ax, &ay, &ab}) {
    if (!a->t) continue;
    // Store the compact sums through the gradient's own strides.
    std::vector<float> f(a->sum.begin(), a->sum.end());
    View src{f.data(), a->t->shape, compact_strides(a->t->shape)};
    if (a->t->numel() > 0) copy_view(src, *a->t);
  }
}

bool backward_tiled(State& st, const View& g, const View& x, const View& y, const View& bias, const View* gx,
                    const View* gy, const View* gb, int act, float mult) {
  const std::vector<int64_t>& shape = g.shape;
  const int r = g.rank();
  if (r == 0 || !is_compact(g) || !full_compact(x, shape) || !full_compact(y, shape)) return false;
  if ((gx && !full_compact(*gx, shape)) || (gy && !full_compact(*gy, shape))) return false;
  const BiasKind bk = bias_kind(bias, shape);
  if (bk == BiasKind::kOther || (gb && bias_kind(*gb, shape) != bk)) return false;
  const int64_t n = shape[r - 1], total = g.numel();
  if (total == 0) return false;

  algorithm alg = algorithm::eltwise_relu;
  float alpha = 0.f;
  const bool use_eltwise = eltwise_alg(act, &alg, &alpha);
  auto eltwise_bwd = [&](int64_t len) {
    Key key{kEltwiseBwd, int64_t(alg), len};
    return st.get<dnnl::eltwise_backward>(key, [&] {
      const memory::desc md({len}, memory::data_type::f32, memory::format_tag::a);
      dnnl::eltwise_forward::primitive_desc hint(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, alpha, 0.f), st.engine);
      return dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(alg, md, md, alpha, 0.f), base_attr(),
                                                    st.engine, hint);
    });
  };
  const int64_t ntiles = (total + kTile - 1) / kTile, tail = total - (ntiles - 1) * kTile;
  std::shared_ptr<const CachedPrimitive> p_full, p_tail;
  if (use_eltwise) {
    p_full = eltwise_bwd(std::min(kTile, total));
    p_tail = tail == std::min(kTile, total) ? p_full : eltwise_bwd(tail);
  }
  const int64_t gbn = bk == BiasKind::kRow ? n : bk == BiasKind::kScalar ? 1 : 0;
  const bool nt = total * int64_t(sizeof(float)) > kStreamBytes;
  const int nthr = total > (1 << 15) ? omp_get_max_threads() : 1;
  std::vector<double> partial(gb ? size_t(nthr) * size_t(gbn) : 0, 0.0);
  const float* bp = bias.data;
  std::exception_ptr error;
  // Allocated before the region: an exception must not leave an OpenMP region.
  Buffer work{size_t(nthr) * 2 * size_t(kTile)};
#pragma omp parallel num_threads(nthr)
  {
    const int t = omp_get_thread_num();
    float* pre = work.get() + size_t(t) * 2 * size_t(kTile);
    float* dpre = pre + kTile;
    double* acc = gb && gbn ? partial.data() + size_t(t) * size_t(gbn) : nullptr;
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < ntiles; ++tile) {
      const int64_t e0 = tile * kTile, len = std::min(kTile, total - e0);
      const float* xp = x.data + e0;
      const float* yp = y.data + e0;
      const float* gp = g.data + e0;
      // pre = x + bias + mult * y, one row segment at a time so the bias index is a column.
      for (int64_t s = 0; s < len;) {
        const int64_t col = (e0 + s) % n, seg = std::min(len - s, n - col);
        const float* bseg = bk == BiasKind::kRow ? bp + col : bk == BiasKind::kScalar ? bp : bp + e0 + s;
        loops::add_mul(pre + s, xp + s, bseg, bk == BiasKind::kScalar, yp + s, mult, seg);
        s += seg;
      }
      if (use_eltwise) {
        try {
          const CachedPrimitive& prim = len == kTile || !p_tail ? *p_full : *p_tail;
          const memory::desc md({len}, memory::data_type::f32, memory::format_tag::a);
          execute(st, prim,
                  {{DNNL_ARG_SRC, mem(st, md, pre)},
                   {DNNL_ARG_DIFF_DST, mem(st, md, gp)},
                   {DNNL_ARG_DIFF_SRC, mem(st, md, dpre)}});
        } catch (...) {
#pragma omp critical(dlfuse_onednn_error)
          if (!error) error = std::current_exception();
        }
      } else if (act == DLFUSE_ACT_RELU) {
        loops::relu_select(dpre, pre, gp, len);
      } else {
        std::memcpy(dpre, gp, size_t(len) * sizeof(float));
      }
      if (gx) {
        if (nt)
          loops::stream_copy(gx->data + e0, dpre, len);
        else
          std::memcpy(gx->data + e0, dpre, size_t(len) * sizeof(float));
      }
      if (gy && nt) {
        loops::scale(pre, dpre, mult, len);  // pre is free again
        loops::stream_copy(gy->data + e0, pre, len);
      } else if (gy) {
        loops::scale(gy->data + e0, dpre, mult, len);
      }
      if (gb && bk == BiasKind::kFull) std::memcpy(gb->data + e0, dpre, size_t(len) * sizeof(float));
      if (acc && bk == BiasKind::kRow) {
        for (int64_t s = 0; s < len;) {
          const int64_t col = (e0 + s) % n, seg = std::min(len - s, n - col);
          loops::accumulate(acc + col, dpre + s, seg);
          s += seg;
        }
      } else if (acc) {
        acc[0] += loops::sum(dpre, len);
      }
    }
    if (nt) loops::store_fence();
  }
  if (error) std::rethrow_exception(error);
  if (gb && gbn) {
    const int64_t sn = gb->rank() ? gb->strides[gb->rank() - 1] : 1;
    for (int64_t j = 0; j < gbn; ++j) {
      double s = 0.0;
      for (int t = 0; t < nthr; ++t) s += partial[size_t(t) * size_t(gbn) + size_t(j)];
      gb->data[j * sn] = float(s);
    }
  }
  return true;
}

// ---- bf16 / f16: row blocks ----------------------------------------------------------
// oneDNN 2.6.3 has no bf16/f16 primitives on AVX2, so these dtypes run the float32 code on
// converted copies. Whole-tensor copies cost a fresh page-faulted f32 buffer per tensor per
// call (12-15x the f32 time at 16384x8192); instead the call is cut into blocks of rows of
// the output's first dim, and each block is converted, computed and stored through small
// buffers reused from block to block.

// A DLTensor restricted to rows [r0, r0 + n) of the broadcast output's first dim; a tensor
// broadcast along that dim (missing or of size 1) is used whole.
struct RowBlock {
  DLTensor t{};
  std::vector<int64_t> shape;
  bool sliced = false;
  RowBlock(const DLTensor* src, int out_rank, int64_t rows_total) : t(*src), shape(src->shape, src->shape + src->ndim) {
    sliced = src->ndim == out_rank && out_rank > 0 && src->shape[0] == rows_total && rows_total > 1;
    t.shape = shape.data();
  }
  void select(const DLTensor* src, int64_t r0, int64_t n) {
    if (!sliced) return;
    int64_t stride0 = 1;
    if (src->strides)
      stride0 = src->strides[0];
    else
      for (int i = 1; i < src->ndim; ++i) stride0 *= src->shape[i];
    shape[0] = n;
    t.byte_offset = src->byte_offset + uint64_t(r0 * stride0) * (src->dtype.bits / 8);
  }
};

// Elements per block and tensor: 4 float32 buffers of 2 MiB stay in the caches.
// DLFUSE_ONEDNN_BLOCK_ELEMS overrides it (tests use tiny blocks to cut every case).
int64_t block_elems() {
  static const int64_t n = [] {
    const char* e = std::getenv("DLFUSE_ONEDNN_BLOCK_ELEMS");
    const long long v = e ? std::atoll(e) : 0;
    return v > 0 ? int64_t(v) : int64_t(1) << 19;
  }();
  return n;
}

// Rows of the output per block, or 0 when the call is not worth cutting.
int64_t block_rows(const DLTensor* out) {
  if (out->ndim < 1 || out->shape[0] < 2) return 0;
  int64_t numel = 1;
  for (int i = 0; i < out->ndim; ++i) numel *= out->shape[i];
  if (numel <= block_elems()) return 0;
  const int64_t inner = numel / out->shape[0];
  return std::max<int64_t>(1, block_elems() / std::max<int64_t>(1, inner));
}

void forward_block(State& st, const DLTensor* x, const DLTensor* y, const DLTensor* b, DLTensor* o, Storage s, int act,
                   float mult, Buffer& bx, Buffer& by, Buffer& bb, Buffer& bo) {
  const View xv = input_f32(x, s, bx), yv = input_f32(y, s, by), bv = input_f32(b, s, bb);
  const View ov = output_f32(o, s, bo);
  if (ov.numel() > 0 && !forward_own(xv, yv, bv, ov, act, mult) && !forward_onednn(st, xv, yv, bv, ov, act, mult))
    forward_generic(xv, yv, bv, ov, act, mult);
  store_output(ov, o, s);
}

void backward_block(State& st, const DLTensor* const* in, DLTensor* const* out, const View* acc_into[3], Storage s,
                    int act, float mult, Buffer* bufs) {
  const View g = input_f32(in[0], s, bufs[0]), x = input_f32(in[1], s, bufs[1]), y = input_f32(in[2], s, bufs[2]),
             bias = input_f32(in[3], s, bufs[3]);
  View gr[3];
  const View* pg[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 3; ++k) {
    if (!out[k]) continue;
    gr[k] = output_f32(out[k], s, bufs[4 + k]);
    pg[k] = &gr[k];
  }
  if (!backward_tiled(st, g, x, y, bias, pg[0], pg[1], pg[2], act, mult))
    backward_generic(g, x, y, bias, pg[0], pg[1], pg[2], act, mult);
  for (int k = 0; k < 3; ++k) {
    if (!out[k]) continue;
    if (acc_into[k]) {  // a gradient of a tensor broadcast along the rows: summed over blocks
      const View& a = *acc_into[k];
      for (int64_t i = 0, n = a.numel(); i < n; ++i) a.data[i] += gr[k].data[i];
    } else {
      store_output(gr[k], out[k], s);
    }
  }
}

// The ABI 1.1 form: d_pre = grad_out * act'(out), then grad_x, grad_y (times the
// multiplier) and grad_bias reduced from it to their own shapes (each broadcastable to
// out). bf16/f16 convert whole tensors: one pass over out, no pre to recompute.
void backward_from_out(State& st, const dlfuse_kernel_args_t* args, int act, float mult) {
  const DLTensor* const* in = args->inputs;
  DLTensor* const* outs = args->outputs;
  const Storage s = storage_of(in[0]->dtype);
  Buffer bg, bo, bufs[3], dz;
  // Rank 0 runs as rank 1 (the dZ pass walks rows of the last dim).
  const int r = std::max(1, int(in[0]->ndim));
  const View g = aligned(input_f32(in[0], s, bg), r), o = aligned(input_f32(in[4], s, bo), r);
  View gr[3];
  std::vector<Reduction> reductions;
  for (int k = 0; k < 3; ++k) {
    if (!outs[k]) continue;
    gr[k] = output_f32(outs[k], s, bufs[k]);
    reductions.push_back(Reduction{&gr[k], k == 1 ? double(mult) : 1.0});
  }
  dz_and_reductions(st, g, &o, DzRule{act, true}, reductions, dz);
  for (int k = 0; k < 3; ++k)
    if (outs[k]) store_output(gr[k], outs[k], s);
}

}  // namespace

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    check_call(args, DLFUSE_ARITY(add_mul_activation), true);
    const int act = kit::activation(args);
    const float mult = float(kit::multiplier(args));
    State& st = *static_cast<State*>(state);
    const DLTensor* const* in = args->inputs;
    DLTensor* out = args->outputs[0];
    const Storage s = storage_of(in[0]->dtype);
    if (add_mul_forward_fast(in[0], in[1], in[2], out, act, mult)) return DLFUSE_STATUS_OK;
    Buffer bx, by, bb, bo;
    const int64_t rows = s == Storage::kF32 ? 0 : block_rows(out);
    if (rows == 0) {
      forward_block(st, in[0], in[1], in[2], out, s, act, mult, bx, by, bb, bo);
      return DLFUSE_STATUS_OK;
    }
    const int r = out->ndim;
    const int64_t m = out->shape[0];
    RowBlock x(in[0], r, m), y(in[1], r, m), b(in[2], r, m), o(out, r, m);
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
      const int64_t n = std::min(rows, m - r0);
      x.select(in[0], r0, n), y.select(in[1], r0, n), b.select(in[2], r0, n), o.select(out, r0, n);
      forward_block(st, &x.t, &y.t, &b.t, &o.t, s, act, mult, bx, by, bb, bo);
    }
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return run_kernel(args, [&]() -> dlfuse_status_t {
    // The kernel declares DLFUSE_KERNEL_TAKES_V1_1_INPUTS: five inputs, x, y, bias and out
    // NULL where absent (four from a host that widens nothing).
    const bool v11 = args->num_inputs == 5;
    check_call(args,
               v11 ? int(DLFUSE_NUM_INPUTS(add_mul_activation_backward))
                   : int(DLFUSE_BASE_INPUTS(add_mul_activation_backward)),
               DLFUSE_NUM_OUTPUTS(add_mul_activation_backward), false,
               v11 ? unsigned(DLFUSE_OPTIONAL_INPUTS(add_mul_activation_backward)) : 0u);
    const int act = kit::activation(args);
    const float mult = float(kit::multiplier(args));
    State& st = *static_cast<State*>(state);
    const DLTensor* const* in = args->inputs;
    if (v11 && in[4]) {
      for (int k = 1; k < 4; ++k)
        if (in[k])
          kit::invalid(std::string(k == 1 ? "x" : k == 2 ? "y" : "bias") + " (out is given)", "NULL", "a tensor");
      check_act_from_out(act, "pass x, y and bias instead");
      if (!add_mul_backward_fast(in[0], nullptr, nullptr, nullptr, in[4], args->outputs, act, mult))
        backward_from_out(st, args, act, mult);
      return DLFUSE_STATUS_OK;
    }
    for (int k = 1; k < 4; ++k)
      if (!in[k])
        kit::invalid(std::string(k == 1 ? "x" : k == 2 ? "y" : "bias") + " (out is absent)", "a tensor", "NULL");
    DLTensor* const* out = args->outputs;
    if (add_mul_backward_fast(in[0], in[1], in[2], in[3], nullptr, out, act, mult)) return DLFUSE_STATUS_OK;
    const Storage s = storage_of(in[0]->dtype);
    Buffer bufs[7];
    const View* none[3] = {nullptr, nullptr, nullptr};
    const int64_t rows = s == Storage::kF32 ? 0 : block_rows(in[0]);
    if (rows == 0) {
      backward_block(st, in, out, none, s, act, mult, bufs);
      return DLFUSE_STATUS_OK;
    }
    const int r = in[0]->ndim;
    const int64_t m = in[0]->shape[0];
    std::vector<RowBlock> blocks;
    blocks.reserve(7);
    for (int k = 0; k < 4; ++k) blocks.emplace_back(in[k], r, m);
    for (int k = 0; k < 3; ++k) blocks.emplace_back(out[k] ? out[k] : in[1 + k], r, m);
    // A gradient whose tensor is not cut (broadcast along the rows) is summed over the
    // blocks in float32 buffers of its own shape, then stored once.
    Buffer acc_buf[3];
    View acc[3];
    const View* acc_into[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k) {
      if (!out[k] || blocks[4 + k].sliced) continue;
      acc[k] = compact_view(acc_buf[k], std::vector<int64_t>(out[k]->shape, out[k]->shape + out[k]->ndim));
      fill_view(acc[k], 0.f);
      acc_into[k] = &acc[k];
    }
    const DLTensor* bin[4];
    DLTensor* bout[3];
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
      const int64_t n = std::min(rows, m - r0);
      for (int k = 0; k < 4; ++k) {
        blocks[k].select(in[k], r0, n);
        bin[k] = &blocks[k].t;
      }
      for (int k = 0; k < 3; ++k) {
        if (out[k]) blocks[4 + k].select(out[k], r0, n);
        bout[k] = out[k] ? &blocks[4 + k].t : nullptr;
      }
      backward_block(st, bin, bout, acc_into, s, act, mult, bufs);
    }
    for (int k = 0; k < 3; ++k)
      if (acc_into[k]) store_output(acc[k], out[k], s);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_onednn
