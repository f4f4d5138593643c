// Layout checks in front of the AVX-512 kernels (pointwise_avx512.h): every tensor must be
// compact over the output's shape, a bias or its gradient a row over the last dim, a
// scalar or full. Everything else (broadcast x or y, strided views, other activations,
// CPUs without AVX-512) stays on add_mul.cpp's paths.
#include "add_mul_fast.h"

#include "layout.h"
#include "pointwise_avx512.h"

namespace dlfuse_onednn {
namespace {

bool span_of(const View& v, const std::vector<int64_t>& shape, avx512::Span* span) {
  switch (bias_kind(v, shape)) {
    case BiasKind::kRow: *span = avx512::Span::kRow; return true;
    case BiasKind::kScalar: *span = avx512::Span::kScalar; return true;
    case BiasKind::kFull: *span = avx512::Span::kFull; return true;
    default: return false;
  }
}

// Fills elem, rows and n from the output's shape; false for what the kernels do not take.
bool setup(const DLTensor* ref, avx512::AddMul* a) {
  if (!avx512::usable() || ref->ndim < 1) return false;
  const Storage s = storage_of(ref->dtype);
  a->elem = s == Storage::kF32 ? avx512::Elem::kF32 : s == Storage::kBF16 ? avx512::Elem::kBF16 : avx512::Elem::kF16;
  a->n = ref->shape[ref->ndim - 1];
  a->rows = 1;
  for (int i = 0; i + 1 < ref->ndim; ++i) a->rows *= ref->shape[i];
  return a->rows * a->n > 0;
}

// Without a row over the last dim every tensor is one flat row, which threads split evenly.
void flatten_unless_row(avx512::AddMul* a, bool row) {
  if (row) return;
  a->n *= a->rows;
  a->rows = 1;
}

}  // namespace

bool add_mul_forward_fast(const DLTensor* x, const DLTensor* y, const DLTensor* bias, DLTensor* out, int act,
                          float mult) {
  avx512::AddMul a;
  if ((act != DLFUSE_ACT_IDENTITY && act != DLFUSE_ACT_RELU) || !setup(out, &a)) return false;
  const View o = view_of(out), xv = view_of(x), yv = view_of(y), bv = view_of(bias);
  if (!is_compact(o) || !full_compact(xv, o.shape) || !full_compact(yv, o.shape)) return false;
  if (!span_of(bv, o.shape, &a.bias_span)) return false;
  a.mult = mult;
  a.act = act;
  a.x = xv.data, a.y = yv.data, a.bias = bv.data, a.out = o.data;
  flatten_unless_row(&a, a.bias_span == avx512::Span::kRow);
  avx512::forward(a);
  return true;
}

bool add_mul_backward_fast(const DLTensor* g, const DLTensor* x, const DLTensor* y, const DLTensor* bias,
                           const DLTensor* out_in, DLTensor* const* grads, int act, float mult) {
  avx512::AddMul a;
  const bool from_out = out_in != nullptr;
  const bool act_ok = act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU ||
                      (from_out && (act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH));
  if (!act_ok || !setup(g, &a)) return false;
  const View gv = view_of(g);
  const std::vector<int64_t>& shape = gv.shape;
  if (!is_compact(gv)) return false;
  if (from_out) {
    const View o = view_of(out_in);
    if (!full_compact(o, shape)) return false;
    a.out_in = o.data;
  } else {
    const View xv = view_of(x), yv = view_of(y), bv = view_of(bias);
    if (!full_compact(xv, shape) || !full_compact(yv, shape) || !span_of(bv, shape, &a.bias_span)) return false;
    a.x = xv.data, a.y = yv.data, a.bias = bv.data;
  }
  void* dst[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 2; ++k) {
    if (!grads[k]) continue;
    const View v = view_of(grads[k]);
    if (!full_compact(v, shape)) return false;
    dst[k] = v.data;
  }
  if (grads[2]) {
    const View v = view_of(grads[2]);
    if (!span_of(v, shape, &a.gb_span)) return false;
    dst[2] = v.data;
  }
  a.g = gv.data, a.gx = dst[0], a.gy = dst[1], a.gb = dst[2];
  a.mult = mult;
  a.act = act;
  const bool row = (!from_out && a.bias_span == avx512::Span::kRow) || (a.gb && a.gb_span == avx512::Span::kRow);
  flatten_unless_row(&a, row);
  avx512::backward(a, from_out);
  return true;
}

}  // namespace dlfuse_onednn
