// add_mul_activation forward and backward (both forms: from x, y, bias, or from out): picks
// the vectorized one-pass path when the layouts allow it (compact output, operands full /
// row-broadcast / scalar), else the strided generic kernels. Everything is enqueued on the
// call's stream.
#include <string>

#include "kernels.h"
#include "ops.h"

namespace dlfuse_cuda {

static_assert(kZeroedCounters * sizeof(unsigned) <= kZeroedCounterBytes, "the per-stream counter block");

void am_backward(CallContext& cx, const AmFast& p) {
  Temp partial(*cx.ds, am_reduces(p) ? am_backward_workspace(cx.dt, p) : 0, cx.stream);
  void* zeroed = am_backward_counts(cx.dt, p) ? zeroed_counters(*cx.ds, cx.stream) : nullptr;
  am_backward_fast(cx.dt, p, partial.get(), static_cast<unsigned*>(zeroed), cx.stream);
}

namespace {

// A tensor's view aligned to the output's shape (its own shape, broadcast dims stride 0).
View aligned_view(const DLTensor* t, const DLTensor* out) {
  View v;
  v.rank = out->ndim;
  const std::vector<int64_t> s = aligned_strides(t, out->ndim);
  for (int d = 0; d < out->ndim; ++d) {
    v.shape[d] = out->shape[d];
    v.stride[d] = s[size_t(d)];
  }
  return v;
}

// The grad's own aligned shape (1 where reduced) and strides, for reduce_to.
View reduce_view(const DLTensor* t, int rank) {
  View v;
  v.rank = rank;
  const std::vector<int64_t> sh = aligned_shape(t, rank), s = aligned_strides(t, rank);
  for (int d = 0; d < rank; ++d) {
    v.shape[d] = sh[size_t(d)];
    v.stride[d] = s[size_t(d)];
  }
  return v;
}

View out_view(const DLTensor* out) {
  View v;
  v.rank = out->ndim;
  for (int d = 0; d < out->ndim; ++d) {
    v.shape[d] = out->shape[d];
    v.stride[d] = elem_stride(out, d);
  }
  return v;
}

// Mode of tensor t over the compact output shape `shape` (rank r): full, row, scalar, or -1.
int mode_of(const DLTensor* t, const DLTensor* out) {
  const int r = out->ndim;
  const std::vector<int64_t> sh = aligned_shape(t, r), s = aligned_strides(t, r);
  bool all_zero = true, full = true;
  int64_t compact = 1;
  for (int d = r - 1; d >= 0; --d) {
    if (s[size_t(d)] != 0) all_zero = false;
    if (sh[size_t(d)] != out->shape[d] || (out->shape[d] != 1 && s[size_t(d)] != compact)) full = false;
    compact *= out->shape[d];
  }
  if (all_zero && numel(t) == 1) return kScalar;
  if (full) return kFull;
  if (r >= 1) {
    bool row = sh[size_t(r - 1)] == out->shape[r - 1] && (out->shape[r - 1] == 1 || s[size_t(r - 1)] == 1);
    for (int d = 0; d < r - 1 && row; ++d) row = sh[size_t(d)] == 1;
    if (row) return kRow;
  }
  return -1;
}

bool out_compact(const DLTensor* out) {
  int64_t compact = 1;
  for (int d = out->ndim - 1; d >= 0; --d) {
    if (out->shape[d] != 1 && elem_stride(out, d) != compact) return false;
    compact *= out->shape[d];
  }
  return true;
}

// [R, C] of the fast path: rows of the last dim, or one long row when nothing is row-broadcast.
void set_geometry(AmFast& p, const DLTensor* out, bool any_row) {
  const int64_t total = numel(out);
  if (!any_row || out->ndim == 0) {
    p.R = total == 0 ? 0 : 1;
    p.C = total;
  } else {
    p.C = out->shape[out->ndim - 1];
    p.R = p.C == 0 ? 0 : total / p.C;
  }
}

}  // namespace

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(add_mul_activation));
    const int act = kit::activation(args);
    const float mult = float(kit::multiplier(args));
    const DLTensor *x = args->inputs[0], *y = args->inputs[1], *b = args->inputs[2];
    DLTensor* out = args->outputs[0];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "out is NULL");
    if (numel(out) == 0) return DLFUSE_STATUS_OK;
    const int xm = mode_of(x, out), ym = mode_of(y, out), bm = mode_of(b, out);
    if (out_compact(out) && xm >= 0 && ym >= 0 && bm >= 0) {
      AmFast p;
      p.x = base_of(x);
      p.xm = xm;
      p.y = base_of(y);
      p.ym = ym;
      p.b = base_of(b);
      p.bm = bm;
      p.out = base_of(out);
      p.act = act;
      p.mult = mult;
      set_geometry(p, out, xm == kRow || ym == kRow || bm == kRow);
      am_forward_fast(cx.dt, p, cx.stream);
      return DLFUSE_STATUS_OK;
    }
    am_forward_generic(cx.dt, base_of(x), aligned_view(x, out), base_of(y), aligned_view(y, out), base_of(b),
                       aligned_view(b, out), base_of(out), out_view(out), act, mult, cx.stream);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    // Five inputs (the kernel takes ABI 1.1's): x, y, bias, or out alone (the registry has
    // checked that exactly one form is given, and the activation).
    CallContext cx(state, args, DLFUSE_ARITY(add_mul_activation_backward),
                   DLFUSE_OPTIONAL_INPUTS(add_mul_activation_backward));
    const int act = kit::activation(args);
    const float mult = float(kit::multiplier(args));
    const DLTensor *g = args->inputs[0], *out = args->inputs[4];
    const bool from_out = out != nullptr;
    // From out: the kernels read out where they read x, with y and bias absent.
    const DLTensor *x = from_out ? out : args->inputs[1], *y = from_out ? nullptr : args->inputs[2],
                   *b = from_out ? nullptr : args->inputs[3];
    DLTensor *gx = args->outputs[0], *gy = args->outputs[1], *gb = args->outputs[2];
    if (!gx && !gy && !gb) return DLFUSE_STATUS_OK;
    const int rank = g->ndim;
    const int64_t n = numel(g);
    // Gradients of an empty output are zero wherever the gradient itself is not empty.
    if (n == 0) {
      for (DLTensor* t : {gx, gy, gb})
        if (t) zero_view(cx.dt, base_of(t), out_view(t), cx.stream);
      return DLFUSE_STATUS_OK;
    }
    const int gm = mode_of(g, g), xm = mode_of(x, g), ym = y ? mode_of(y, g) : int(kAbsent),
              bm = b ? mode_of(b, g) : int(kAbsent);
    auto out_mode = [&](const DLTensor* t) {
      if (!t) return int(kAbsent);
      const int m = mode_of(t, g);
      if (m == kFull) return int(kFull);
      if (numel(t) == 1) return int(kScalar);
      if (m == kRow) return int(kRow);
      return -1;
    };
    const int gxm = out_mode(gx), gym = out_mode(gy), gbm = out_mode(gb);
    if (gm == kFull && xm >= 0 && ym >= 0 && bm >= 0 && gxm >= 0 && gym >= 0 && gbm >= 0) {
      AmFast p;
      p.g = base_of(g);
      p.gm = gm;
      p.x = base_of(x);
      p.xm = xm;
      p.y = y ? base_of(y) : nullptr;
      p.ym = ym;
      p.b = b ? base_of(b) : nullptr;
      p.bm = bm;
      p.from_out = from_out;
      auto last_stride = [](const DLTensor* t) { return t && t->ndim > 0 ? elem_stride(t, t->ndim - 1) : int64_t(0); };
      p.gx = gx ? base_of(gx) : nullptr;
      p.gxm = gxm;
      p.gx_stride = last_stride(gx);
      p.gy = gy ? base_of(gy) : nullptr;
      p.gym = gym;
      p.gy_stride = last_stride(gy);
      p.gb = gb ? base_of(gb) : nullptr;
      p.gbm = gbm;
      p.gb_stride = last_stride(gb);
      p.act = act;
      p.mult = mult;
      const bool any_row = xm == kRow || ym == kRow || bm == kRow || gxm == kRow || gym == kRow || gbm == kRow;
      set_geometry(p, g, any_row);
      am_backward(cx, p);
      return DLFUSE_STATUS_OK;
    }
    // Generic: d_pre (float) over the output's shape, then one reduce_to per gradient.
    Temp dpre(*cx.ds, size_t(n) * sizeof(float), cx.stream);
    const View none;
    am_dpre_generic(cx.dt, base_of(g), aligned_view(g, g), base_of(x), aligned_view(x, g), y ? base_of(y) : nullptr,
                    y ? aligned_view(y, g) : none, b ? base_of(b) : nullptr, b ? aligned_view(b, g) : none, dpre.get(),
                    true, act, from_out, mult, cx.stream);
    const View full = compact_view(g->shape, rank);
    if (gx) reduce_to(cx.dt, dpre.get(), true, full, base_of(gx), reduce_view(gx, rank), 1.f, cx.stream);
    if (gy) reduce_to(cx.dt, dpre.get(), true, full, base_of(gy), reduce_view(gy, rank), mult, cx.stream);
    if (gb) reduce_to(cx.dt, dpre.get(), true, full, base_of(gb), reduce_view(gb, rank), 1.f, cx.stream);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
