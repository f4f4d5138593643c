// The GEMM epilogue family of ABI 1.1: matmul_add_activation and matmul_add_residual, with
// their backwards, on cuBLASLt (gemm.h) and the plugin's own passes (kernels.h).
//
// Forward: relu and GELU (tanh form) run in cuBLASLt's epilogue (GELU_AUX_BIAS writes the
// pre-activation too) when a NaN-keeping kernel exists (gemm_lt.cpp probes); every other
// activation runs as one pass over the GEMM's output. The residual is cuBLASLt's C
// (beta = 1), read in place or from its own tensor without a copy where its layout allows.
// Backward: one pass writes dZ and, for a row-vector bias, its column sums; then the two
// GEMMs of matmul_add_relu_backward.
#include "matmul_parts.h"

namespace dlfuse_cuda {
namespace {

// dst = act(src) over the output's shape; src and dst views over it, in place allowed.
void activation_pass(CallContext& cx, int act, const void* src, const View& sv, void* dst, const View& dv) {
  if (act == DLFUSE_ACT_IDENTITY && src == dst) return;
  if (is_compact(sv) && is_compact(dv)) {
    AmFast p;
    p.x = src;
    p.y = p.b = nullptr;
    p.ym = p.bm = kAbsent;
    p.out = dst;
    p.act = act;
    p.R = 1;
    p.C = dv.numel();
    am_forward_fast(cx.dt, p, cx.stream);
  } else {
    const View none;
    am_forward_generic(cx.dt, src, sv, nullptr, none, nullptr, none, dst, dv, act, 1.f, cx.stream);
  }
}

// The activation cuBLASLt applies in its epilogue: relu, and GELU (tanh form; float32 too:
// it passed the float32 conformance tolerance on the H100, 139 cases).
EpiAct fused_act(int act) {
  if (act == DLFUSE_ACT_RELU) return EpiAct::kRelu;
  if (act == DLFUSE_ACT_GELU_TANH) return EpiAct::kGelu;
  return EpiAct::kNone;
}

bool same_view(const DLTensor* x, const DLTensor* y) {
  if (base_of(x) != base_of(y) || x->ndim != y->ndim) return false;
  for (int d = 0; d < x->ndim; ++d)
    if (x->shape[d] != y->shape[d] || (x->shape[d] != 1 && elem_stride(x, d) != elem_stride(y, d))) return false;
  return true;
}

void check_matmul_ranks(const DLTensor* a, const DLTensor* b, const DLTensor* out) {
  if (a->ndim < 2 || b->ndim < 2 || out->ndim < 2)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "matmul operands need at least 2 dims");
}

// matmul_add_activation with the activation (and pre) in cuBLASLt's epilogue; false, with
// nothing left to undo, when that is not possible here.
bool forward_fused(CallContext& cx, const dlfuse_kernel_args_t* args, int act, const DLTensor* a, const DLTensor* b,
                   const DLTensor* bias, DLTensor* out, DLTensor* pre) {
  const EpiAct ea = fused_act(act);
  if (ea == EpiAct::kNone || (pre && ea != EpiAct::kGelu)) return false;
  const GemmTarget t(cx, out);
  const Mat P = pre ? mat_of(pre, out->ndim - 2) : Mat();
  if (pre && !(t.direct && aux_compatible(P, t.D))) return false;
  Gemm g = gemm_into(cx, a, b, t, read_tf32(args));
  add_bias(cx, g, bias, t);
  g.act = ea;
  g.aux = pre ? &P : nullptr;
  if (!gemm(g, *cx.ds, cx.stream)) return false;
  t.copy_back(cx.dt, cx.stream);
  return true;
}

// True when v is [rows, C] with rows `*ld` elements apart: unit stride along the last dim,
// the others collapsing into one (a column slice, as the gradient of one input of a
// concatenation is).
bool pitched_rows(const View& v, int64_t* ld) {
  const int r = v.rank;
  const int64_t C = v.shape[r - 1];
  if (r < 2 || (C != 1 && v.stride[r - 1] != 1)) return false;
  int64_t expect = -1;  // the stride the next dim outwards must have
  for (int d = r - 2; d >= 0; --d) {
    if (v.shape[d] == 1) continue;
    if (expect < 0) {
      *ld = v.stride[d];
      if (*ld < C) return false;
    } else if (v.stride[d] != expect) {
      return false;
    }
    expect = v.stride[d] * v.shape[d];
  }
  if (expect < 0) *ld = C;  // one row
  return true;
}

// base itself when v is compact, else a compact copy of the pitched view v in buf.
const void* compacted(CallContext& cx, const void* base, const View& v, Temp& buf) {
  if (is_compact(v)) return base;
  int64_t ld = 0;
  pitched_rows(v, &ld);
  const int64_t C = v.shape[v.rank - 1], rows = v.numel() / C;
  buf.reset(*cx.ds, size_t(v.numel()) * size_t(dsize(cx.dt)));
  copy_rows(cx.dt, base, ld, buf.get(), rows, C, cx.stream);
  return buf.get();
}

bool compact_or_pitched(const View& v) {
  int64_t ld;
  return is_compact(v) || pitched_rows(v, &ld);
}

// A broadcast grad_out (the gradient of a sum or a mean) as the fast pass reads it in place:
// kScalar where every stride is 0, kRow where only the last dim moves (unit stride); else
// kFull. The generic strided pass took some 10x the fast one's time on the same bytes.
int broadcast_mode(const View& v) {
  const int r = v.rank;
  bool scalar = true, row = r >= 1 && (v.shape[r - 1] == 1 || v.stride[r - 1] == 1);
  for (int d = 0; d < r; ++d) {
    if (v.shape[d] == 1 || v.stride[d] == 0) continue;
    scalar = false;
    if (d < r - 1) row = false;
  }
  return scalar ? int(kScalar) : row ? int(kRow) : int(kFull);
}

// dZ = grad_out * act'(src) compact over `shape`, src the forward's pre or (from_out) out.
// Returns true when grad_bias was written in the same pass (a row vector or a scalar).
bool activation_grad(CallContext& cx, int act, bool from_out, const DLTensor* gout, const DLTensor* src,
                     const std::vector<int64_t>& shape, void* dz, DLTensor* gbias) {
  const int rank = int(shape.size());
  const View gv = view_over(gout, shape), sv = view_over(src, shape);
  const int64_t N = shape[size_t(rank - 1)], n = gv.numel();
  int gbm = kAbsent;
  if (gbias && numel(gbias) > 0) {
    const std::vector<int64_t> sh = aligned_shape(gbias, rank);
    bool row = sh[size_t(rank - 1)] == N && N > 1;
    for (int d = 0; d < rank - 1 && row; ++d) row = sh[size_t(d)] == 1;
    gbm = numel(gbias) == 1 ? int(kScalar) : row ? int(kRow) : -1;
  }
  if (gbm < 0) gbm = kAbsent;  // another broadcast: reduced from dZ afterwards
  // A strided operand with pitched rows is compacted first: a 2-D copy and the fast pass
  // take a fraction of the generic strided pass (which also leaves the bias to another pass).
  const int gm = broadcast_mode(gv);
  if (n > 0 && (gm != kFull || compact_or_pitched(gv)) && compact_or_pitched(sv)) {
    Temp gbuf(*cx.ds, 0, cx.stream), sbuf(*cx.ds, 0, cx.stream);
    AmFast p;
    p.x = compacted(cx, base_of(src), sv, sbuf);
    p.y = p.b = nullptr;
    p.ym = p.bm = kAbsent;
    p.g = gm == kFull ? compacted(cx, base_of(gout), gv, gbuf) : base_of(gout);
    p.gm = gm;
    p.gx = dz;
    p.gxm = kFull;
    p.gx_cached = true;
    p.gb = gbm == kAbsent ? nullptr : base_of(gbias);
    p.gbm = gbm;
    p.gb_stride = gbm == kRow ? elem_stride(gbias, gbias->ndim - 1) : 0;
    p.act = act;
    p.from_out = from_out;
    p.C = N;
    p.R = N == 0 ? 0 : n / N;
    am_backward(cx, p);
    return gbm != kAbsent;
  }
  const View none;
  am_dpre_generic(cx.dt, base_of(gout), gv, base_of(src), sv, nullptr, none, nullptr, none, dz, false, act, from_out,
                  1.f, cx.stream);
  return false;
}

}  // namespace

dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_activation));
    const int act = kit::activation(args);
    const DLTensor *a = args->inputs[0], *b = args->inputs[1], *bias = args->inputs[2];
    DLTensor *out = args->outputs[0], *pre = args->outputs[1];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "out is NULL");
    check_matmul_ranks(a, b, out);
    if (numel(out) == 0) return DLFUSE_STATUS_OK;
    const std::vector<int64_t> oshape(out->shape, out->shape + out->ndim);
    if (a->shape[a->ndim - 1] == 0) {  // K = 0: pre = bias
      const View bv = view_over(bias, oshape);
      if (pre) copy_view(cx.dt, base_of(bias), bv, base_of(pre), own_view(pre), 0, cx.stream);
      activation_pass(cx, act, base_of(bias), bv, base_of(out), own_view(out));
      return DLFUSE_STATUS_OK;
    }
    if (forward_fused(cx, args, act, a, b, bias, out, pre)) return DLFUSE_STATUS_OK;
    // a @ b + bias into pre (or out), then the activation pass into out.
    const GemmTarget t(cx, pre ? pre : out);
    Gemm g = gemm_into(cx, a, b, t, read_tf32(args));
    add_bias(cx, g, bias, t);
    gemm(g, *cx.ds, cx.stream);
    if (pre)
      activation_pass(cx, act, t.D.base, t.view, base_of(out), own_view(out));
    else
      activation_pass(cx, act, t.D.base, t.view, t.D.base, t.view);
    t.copy_back(cx.dt, cx.stream);
    return DLFUSE_STATUS_OK;
  });
}

void activation_dz(CallContext& cx, int act, bool from_out, const DLTensor* gout, const DLTensor* src,
                   const std::vector<int64_t>& shape, void* dz, DLTensor* gbias) {
  const bool bias_done = numel(gout) > 0 && activation_grad(cx, act, from_out, gout, src, shape, dz, gbias);
  if (!bias_done) reduce_into(cx, dz, shape, gbias);
}

void activation_backward(CallContext& cx, bool tf32, int act, bool from_out, const DLTensor* gout, const DLTensor* src,
                         const DLTensor* a, const DLTensor* b, DLTensor* ga, DLTensor* gb, DLTensor* gbias) {
  if (!ga && !gb && !gbias) return;
  const std::vector<int64_t> oshape(gout->shape, gout->shape + gout->ndim);
  Temp dz(*cx.ds, size_t(numel(gout)) * size_t(dsize(cx.dt)), cx.stream);
  activation_dz(cx, act, from_out, gout, src, oshape, dz.get(), gbias);
  operand_grads(cx, tf32, compact_mat(dz.get(), oshape), oshape, a, b, ga, gb);
}

dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    // Inputs grad_out, a, b, out, pre: exactly one of out and pre (the registry checked).
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_activation_backward),
                   DLFUSE_OPTIONAL_INPUTS(matmul_add_activation_backward));
    const DLTensor *pre = args->inputs[4], *src = pre ? pre : args->inputs[3];
    DLTensor *ga = args->outputs[0], *gb = args->outputs[1], *gbias = args->outputs[2];
    if (!src && (ga || gb || gbias)) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "neither out nor pre is given");
    activation_backward(cx, read_tf32(args), kit::activation(args), !pre, args->inputs[0], src, args->inputs[1],
                        args->inputs[2], ga, gb, gbias);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_residual));
    const DLTensor *a = args->inputs[0], *b = args->inputs[1], *bias = args->inputs[2], *res = args->inputs[3];
    DLTensor* out = args->outputs[0];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "out is NULL");
    check_matmul_ranks(a, b, out);
    if (numel(out) == 0) return DLFUSE_STATUS_OK;
    const int rank = out->ndim;
    const std::vector<int64_t> oshape(out->shape, out->shape + rank);
    const bool in_place = same_view(out, res);
    if (a->shape[a->ndim - 1] == 0) {  // K = 0: residual + bias (elementwise, so in place is safe)
      am_forward_generic(cx.dt, base_of(res), view_over(res, oshape), nullptr, View(), base_of(bias),
                         view_over(bias, oshape), base_of(out), own_view(out), DLFUSE_ACT_IDENTITY, 1.f, cx.stream);
      return DLFUSE_STATUS_OK;
    }
    const GemmTarget t(cx, out);
    Gemm g = gemm_into(cx, a, b, t, read_tf32(args));
    g.beta = 1.f;
    // The residual's own matrix view, where it has one (it may be 1-D or 0-D: broadcast).
    const bool res_full = res->ndim >= 2 && aligned_shape(res, rank) == oshape;
    const Mat R = res_full ? mat_of(res, rank - 2) : Mat();
    if (!bias_is_epilogue_vector(bias, t)) {
      // Both addends into D first: residual + bias in one pass.
      am_forward_generic(cx.dt, base_of(res), view_over(res, oshape), nullptr, View(), base_of(bias),
                         view_over(bias, oshape), t.D.base, t.view, DLFUSE_ACT_IDENTITY, 1.f, cx.stream);
    } else {
      use_bias_epilogue(g, bias, rank);
      if (in_place && t.direct) {
        // C is D: cuBLASLt reads the residual where it writes the result.
      } else if (!in_place && t.direct && res_full && same_orientation(R, t.D)) {
        g.C = &R;
      } else {
        copy_view(cx.dt, base_of(res), view_over(res, oshape), t.D.base, t.view, 0, cx.stream);
      }
    }
    gemm(g, *cx.ds, cx.stream);
    t.copy_back(cx.dt, cx.stream);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_residual_backward));
    const DLTensor *gout = args->inputs[0], *a = args->inputs[1], *b = args->inputs[2];
    DLTensor *ga = args->outputs[0], *gb = args->outputs[1], *gbias = args->outputs[2], *gres = args->outputs[3];
    if (!ga && !gb && !gbias && !gres) return DLFUSE_STATUS_OK;
    const std::vector<int64_t> oshape(gout->shape, gout->shape + gout->ndim);
    // dZ is grad_out itself; a compact copy only when its layout is not compact.
    const View gv = view_over(gout, oshape);
    const bool compact = is_compact(gv);
    Temp copy(*cx.ds, compact ? 0 : size_t(numel(gout)) * size_t(dsize(cx.dt)), cx.stream);
    void* dz = compact ? static_cast<void*>(base_of(gout)) : copy.get();
    if (!compact)
      copy_view(cx.dt, base_of(gout), gv, dz, compact_view(oshape.data(), int(oshape.size())), 0, cx.stream);
    reduce_into(cx, dz, oshape, gbias);
    reduce_into(cx, dz, oshape, gres);
    operand_grads(cx, read_tf32(args), compact_mat(dz, oshape), oshape, a, b, ga, gb);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
