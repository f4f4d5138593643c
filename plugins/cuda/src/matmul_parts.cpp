#include "matmul_parts.h"

namespace dlfuse_cuda {
namespace {

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

bool expressible(const DLTensor* t) {
  const int r = t->ndim;
  return classify(t->shape[r - 2], t->shape[r - 1], elem_stride(t, r - 2), elem_stride(t, r - 1)).ok;
}

}  // namespace

View view_full(const DLTensor* t, int rank) {
  View v;
  v.rank = rank;
  const std::vector<int64_t> sh = aligned_shape(t, rank), s = aligned_strides(t, rank);
  for (int d = 0; d < rank; ++d) {
    v.shape[d] = sh[size_t(d)];
    v.stride[d] = s[size_t(d)];
  }
  return v;
}

View view_over(const DLTensor* t, const std::vector<int64_t>& shape) {
  View v;
  v.rank = int(shape.size());
  const std::vector<int64_t> s = aligned_strides(t, v.rank);
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = shape[size_t(d)];
    v.stride[d] = s[size_t(d)];
  }
  return v;
}

View own_view(const DLTensor* t) { return view_full(t, t->ndim); }

bool is_compact(const View& v) {
  int64_t s = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.stride[d] != s) return false;
    s *= v.shape[d];
  }
  return true;
}

bool read_tf32(const dlfuse_kernel_args_t* args) { return kit::attr_int(args, DLFUSE_ATTR_ALLOW_TF32, 0) != 0; }

GemmTarget::GemmTarget(CallContext& cx, DLTensor* t)
    : tensor(t),
      shape(t->shape, t->shape + t->ndim),
      direct(expressible(t)),
      tmp(*cx.ds, direct ? 0 : size_t(numel(t)) * size_t(dsize(cx.dt)), cx.stream) {
  const int rank = t->ndim, nb = rank - 2;
  D = mat_of(t, nb);
  view = own_view(t);
  if (!direct) {
    view = compact_view(shape.data(), rank);
    D.base = static_cast<char*>(tmp.get());
    D.sr = D.C;
    D.sc = 1;
    for (int d = 0; d < nb; ++d) D.bs[size_t(d)] = shape[size_t(d)] == 1 ? 0 : view.stride[d];
  }
}

void GemmTarget::copy_back(DType dt, cudaStream_t s) const {
  if (!direct) copy_view(dt, D.base, view, base_of(tensor), own_view(tensor), 0, s);
}

Gemm gemm_into(CallContext& cx, const DLTensor* a, const DLTensor* b, const GemmTarget& target, bool tf32) {
  const int nb = int(target.shape.size()) - 2;
  Gemm g;
  g.in = g.out = cx.dt;
  g.tf32 = tf32;
  g.X = mat_of(a, nb);
  g.Y = mat_of(b, nb);
  g.batch_shape.assign(target.shape.begin(), target.shape.end() - 2);
  g.D = target.D;
  return g;
}

bool bias_is_epilogue_vector(const DLTensor* bias, const GemmTarget& target) {
  const int rank = int(target.shape.size());
  const bool d_row = classify(target.D.R, target.D.C, target.D.sr, target.D.sc).row;
  const std::vector<int64_t> bstr = aligned_strides(bias, rank), bsh = aligned_shape(bias, rank);
  const int along = d_row ? rank - 1 : rank - 2, other = d_row ? rank - 2 : rank - 1;
  return bsh[size_t(other)] == 1 &&
         (bsh[size_t(along)] == 1 ? target.shape[size_t(along)] == 1 : bstr[size_t(along)] == 1);
}

void use_bias_epilogue(Gemm& g, const DLTensor* bias, int rank) {
  const std::vector<int64_t> bstr = aligned_strides(bias, rank);
  g.bias = base_of(bias);
  g.bias_bs.assign(bstr.begin(), bstr.end() - 2);
}

void add_bias(CallContext& cx, Gemm& g, const DLTensor* bias, const GemmTarget& t) {
  if (bias_is_epilogue_vector(bias, t)) {
    use_bias_epilogue(g, bias, int(t.shape.size()));
  } else {
    copy_view(cx.dt, base_of(bias), view_over(bias, t.shape), t.D.base, t.view, 0, cx.stream);
    g.beta = 1.f;
  }
}

void reduce_into(CallContext& cx, const void* dz, const std::vector<int64_t>& shape, DLTensor* grad) {
  if (!grad || numel(grad) == 0) return;
  const int rank = int(shape.size());
  const int64_t n = prod(shape);
  cudaStream_t s = cx.stream;
  if (n == 0) {
    zero_view(cx.dt, base_of(grad), own_view(grad), s);
    return;
  }
  const View full = compact_view(shape.data(), rank);
  const std::vector<int64_t> sh = aligned_shape(grad, rank);
  if (sh == shape) {  // nothing reduced
    copy_view(cx.dt, dz, full, base_of(grad), view_over(grad, shape), 0, s);
    return;
  }
  const int64_t N = shape[size_t(rank - 1)];
  bool row = sh[size_t(rank - 1)] == N;
  for (int d = 0; d < rank - 1 && row; ++d) row = sh[size_t(d)] == 1;
  if (row && N > 1) {
    // Column sums of dZ as [n / N, N]: per-chunk partials, then one pass over them.
    const int max_chunks = 1024;
    Temp part(*cx.ds, size_t(max_chunks) * size_t(N) * sizeof(float), s);
    const int nch = colsum_partials(cx.dt, dz, n / N, N, static_cast<float*>(part.get()), max_chunks, s);
    finish_colsum(cx.dt, static_cast<const float*>(part.get()), nch, N, base_of(grad),
                  elem_stride(grad, grad->ndim - 1), 1.f, false, s);
    return;
  }
  reduce_to(cx.dt, dz, false, full, base_of(grad), view_full(grad, rank), 1.f, s);
}

Mat compact_mat(void* base, const std::vector<int64_t>& shape) {
  const int rank = int(shape.size()), nb = rank - 2;
  const View full = compact_view(shape.data(), rank);
  Mat Z;
  Z.base = static_cast<char*>(base);
  Z.R = shape[size_t(rank - 2)];
  Z.C = shape[size_t(rank - 1)];
  Z.sr = Z.C;
  Z.sc = 1;
  Z.bs.resize(size_t(nb));
  for (int d = 0; d < nb; ++d) Z.bs[size_t(d)] = shape[size_t(d)] == 1 ? 0 : full.stride[d];
  return Z;
}

namespace {

// One operand's gradient: X @ Y straight into it when nothing is reduced over a batch dim
// and its layout is expressible, else in float into a temporary that reduce_to sums.
void operand_grad(CallContext& cx, bool tf32, DLTensor* gt, const DLTensor* op_t, const Mat& X, const Mat& Y,
                  int64_t inner, const std::vector<int64_t>& bshape) {
  if (!gt || numel(gt) == 0) return;
  const DType dt = cx.dt;
  cudaStream_t s = cx.stream;
  const int nb = int(bshape.size()), rank = nb + 2;
  if (inner == 0 || prod(bshape) == 0) {
    zero_view(dt, base_of(gt), own_view(gt), s);
    return;
  }
  const std::vector<int64_t> osh = aligned_shape(op_t, rank);
  bool reduced = false;
  for (int d = 0; d < nb; ++d) reduced = reduced || osh[size_t(d)] != bshape[size_t(d)];
  const Mat Dm = mat_of(gt, nb);
  Gemm g;
  g.in = g.out = dt;
  g.tf32 = tf32;
  g.X = X;
  g.Y = Y;
  g.batch_shape = bshape;
  if (!reduced && classify(Dm.R, Dm.C, Dm.sr, Dm.sc).ok) {
    g.D = Dm;
    gemm(g, *cx.ds, s);
    return;
  }
  std::vector<int64_t> tshape = bshape;
  tshape.push_back(Dm.R);
  tshape.push_back(Dm.C);
  const View tv = compact_view(tshape.data(), rank);
  Temp acc(*cx.ds, size_t(tv.numel()) * sizeof(float), s);
  g.D = compact_mat(acc.get(), tshape);
  g.out_f32 = true;
  gemm(g, *cx.ds, s);
  reduce_to(dt, acc.get(), true, tv, base_of(gt), view_full(gt, rank), 1.f, s);
}

}  // namespace

void operand_grads(CallContext& cx, bool tf32, const Mat& dz, const std::vector<int64_t>& shape, const DLTensor* a,
                   const DLTensor* b, DLTensor* ga, DLTensor* gb) {
  const int rank = int(shape.size()), nb = rank - 2;
  const std::vector<int64_t> bshape(shape.begin(), shape.end() - 2);
  const int64_t M = shape[size_t(rank - 2)], N = shape[size_t(rank - 1)];
  const Mat A = mat_of(a, nb), B = mat_of(b, nb);
  operand_grad(cx, tf32, ga, a, dz, transposed(B), N, bshape);
  operand_grad(cx, tf32, gb, b, transposed(A), dz, M, bshape);
}

}  // namespace dlfuse_cuda
