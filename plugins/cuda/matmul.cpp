// matmul_add_relu forward and backward on cuBLASLt (gemm.h).
//
// Forward: bias [N] (or [M, 1] for a transposed output) goes through the BIAS epilogue; any
// other bias is broadcast into the output first and added with beta = 1. relu runs in the
// epilogue when the chosen kernel keeps NaN (gemm.cpp checks), else in our own pass.
// Backward: dZ = where(out > 0 or NaN, grad_out, 0) by our kernel; grad_a = dZ b^T and
// grad_b = a^T dZ by cuBLASLt straight into the gradients when nothing is reduced, else in
// float into a temporary that our reduce_to kernel sums over the broadcast batch dims.
#include <string>

#include "gemm.h"
#include "kernels.h"
#include "ops.h"

namespace dlfuse_cuda {
namespace {

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

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

// t's view over the (broadcast) shape `shape` of rank r.
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

bool read_tf32(const dlfuse_kernel_args_t* args) { return kit::attr_int(args, DLFUSE_ATTR_ALLOW_TF32, 0) != 0; }

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, 3, 1);
    const DLTensor *a = args->inputs[0], *b = args->inputs[1], *bias = args->inputs[2];
    DLTensor* out = args->outputs[0];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "out is NULL");
    if (a->ndim < 2 || b->ndim < 2 || out->ndim < 2)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "matmul operands need at least 2 dims");
    if (numel(out) == 0) return DLFUSE_STATUS_OK;
    const int rank = out->ndim, nb = rank - 2;
    const std::vector<int64_t> oshape(out->shape, out->shape + rank);
    const int64_t M = out->shape[rank - 2], N = out->shape[rank - 1], K = a->shape[a->ndim - 1];
    DeviceState& ds = *cx.ds;
    cudaStream_t s = cx.stream;
    const View ov = own_view(out);
    if (K == 0) {  // relu(bias)
      copy_view(cx.dt, base_of(bias), view_over(bias, oshape), base_of(out), ov, 1, s);
      return DLFUSE_STATUS_OK;
    }
    Gemm g;
    g.in = g.out = cx.dt;
    g.tf32 = read_tf32(args);
    g.X = mat_of(a, nb);
    g.Y = mat_of(b, nb);
    g.batch_shape.assign(oshape.begin(), oshape.end() - 2);
    Mat D = mat_of(out, nb);
    const Lay ld = classify(D.R, D.C, D.sr, D.sc);
    // The output must be expressible; otherwise compute into a compact temporary.
    Temp dtmp(ds, ld.ok ? 0 : size_t(numel(out)) * size_t(dsize(cx.dt)), s);
    View dview = ov;
    if (!ld.ok) {
      dview = compact_view(oshape.data(), rank);
      D.base = static_cast<char*>(dtmp.get());
      D.sr = N;
      D.sc = 1;
      for (int d = 0; d < nb; ++d) D.bs[size_t(d)] = oshape[size_t(d)] == 1 ? 0 : dview.stride[d];
    }
    g.D = D;
    // Bias as an epilogue vector along cuBLASLt's rows: [N] for a row-major D, [M, 1] otherwise.
    const bool d_row = classify(D.R, D.C, D.sr, D.sc).row;
    const std::vector<int64_t> bstr = aligned_strides(bias, rank), bsh = aligned_shape(bias, rank);
    const int along = d_row ? rank - 1 : rank - 2, other = d_row ? rank - 2 : rank - 1;
    const bool vec_bias = bsh[size_t(other)] == 1 && (bsh[size_t(along)] == 1 ? out->shape[along] == 1 : bstr[size_t(along)] == 1);
    if (vec_bias) {
      g.bias = base_of(bias);
      g.bias_bs.assign(bstr.begin(), bstr.end() - 2);
    } else {
      // Any other bias: broadcast it into D, then D = A B + 1 * D.
      copy_view(cx.dt, base_of(bias), view_over(bias, oshape), D.base, dview, 0, s);
      g.beta = 1.f;
    }
    g.relu = true;
    if (!gemm(g, ds, s)) {
      // No NaN-keeping RELU epilogue for this problem: bias-only epilogue, then our relu.
      g.relu = false;
      gemm(g, ds, s);
      const View cvw = compact_view(oshape.data(), rank);
      bool compact = D.sc == 1 && (M == 1 || D.sr == N);
      for (int d = 0; d < nb; ++d) compact = compact && (oshape[size_t(d)] == 1 || D.bs[size_t(d)] == cvw.stride[d]);
      if (compact)
        relu_compact(cx.dt, D.base, numel(out), s);
      else
        copy_view(cx.dt, D.base, dview, D.base, dview, 1, s);
    }
    if (!ld.ok) copy_view(cx.dt, D.base, dview, base_of(out), ov, 0, s);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, 4, 3);
    const DLTensor *gout = args->inputs[0], *a = args->inputs[1], *b = args->inputs[2], *out = args->inputs[3];
    DLTensor *ga = args->outputs[0], *gb = args->outputs[1], *gbias = args->outputs[2];
    if (!ga && !gb && !gbias) return DLFUSE_STATUS_OK;
    const int rank = out->ndim, nb = rank - 2;
    const std::vector<int64_t> oshape(out->shape, out->shape + rank);
    const std::vector<int64_t> bshape(oshape.begin(), oshape.end() - 2);
    const int64_t M = oshape[size_t(rank - 2)], N = oshape[size_t(rank - 1)];
    const int64_t nbatch = prod(bshape);
    DeviceState& ds = *cx.ds;
    cudaStream_t s = cx.stream;
    const DType dt = cx.dt;
    const int64_t nout = numel(out);

    // dZ, compact over out's shape.
    Temp dz(ds, size_t(nout) * size_t(dsize(dt)), s);
    const View full = compact_view(oshape.data(), rank);
    relu_grad(dt, base_of(gout), view_over(gout, oshape), base_of(out), view_over(out, oshape), dz.get(), s);
    Mat Z;
    Z.base = static_cast<char*>(dz.get());
    Z.R = M;
    Z.C = N;
    Z.sr = N;
    Z.sc = 1;
    Z.bs.resize(size_t(nb));
    for (int d = 0; d < nb; ++d) Z.bs[size_t(d)] = bshape[size_t(d)] == 1 ? 0 : full.stride[d];

    if (gbias && numel(gbias) > 0) {
      if (nout == 0) {
        zero_view(dt, base_of(gbias), own_view(gbias), s);
      } else {
        const std::vector<int64_t> sh = aligned_shape(gbias, rank);
        bool row = sh[size_t(rank - 1)] == N;
        for (int d = 0; d < rank - 1 && row; ++d) row = sh[size_t(d)] == 1;
        if (row && N > 1) {
          // Column sums of dZ as [nbatch * M, N]: per-chunk partials, then one pass over them.
          const int64_t R = nout / N;
          const int max_chunks = 1024;
          Temp part(ds, size_t(max_chunks) * size_t(N) * sizeof(float), s);
          const int nch = colsum_partials(dt, dz.get(), R, N, static_cast<float*>(part.get()), max_chunks, s);
          finish_colsum(dt, static_cast<const float*>(part.get()), nch, N, base_of(gbias),
                        elem_stride(gbias, gbias->ndim - 1), 1.f, false, s);
        } else {
          reduce_to(dt, dz.get(), false, full, base_of(gbias), view_full(gbias, rank), 1.f, s);
        }
      }
    }

    // grad_a = reduce(dZ @ b^T) ([.., M, K]); grad_b = reduce(a^T @ dZ) ([.., K, N]).
    auto grad = [&](DLTensor* gt, const DLTensor* op_t, const Mat& X, const Mat& Y, int64_t inner) {
      if (!gt || numel(gt) == 0) return;
      if (inner == 0 || nbatch == 0) {
        zero_view(dt, base_of(gt), own_view(gt), s);
        return;
      }
      // Direct when the gradient is not reduced over any batch dim and its layout is expressible.
      const std::vector<int64_t> osh = aligned_shape(op_t, rank);
      bool reduced = false;
      for (int d = 0; d < nb; ++d) reduced = reduced || osh[size_t(d)] != bshape[size_t(d)];
      Mat Dm = mat_of(gt, nb);
      Gemm g;
      g.in = g.out = dt;
      g.tf32 = read_tf32(args);
      g.X = X;
      g.Y = Y;
      g.batch_shape = bshape;
      if (!reduced && classify(Dm.R, Dm.C, Dm.sr, Dm.sc).ok) {
        g.D = Dm;
        gemm(g, ds, s);
        return;
      }
      // Float temporary over the full batch, then reduce_to into the gradient.
      std::vector<int64_t> tshape = bshape;
      tshape.push_back(Dm.R);
      tshape.push_back(Dm.C);
      const View tv = compact_view(tshape.data(), rank);
      Temp acc(ds, size_t(tv.numel()) * sizeof(float), s);
      Mat T;
      T.base = static_cast<char*>(acc.get());
      T.R = Dm.R;
      T.C = Dm.C;
      T.sr = Dm.C;
      T.sc = 1;
      T.bs.resize(size_t(nb));
      for (int d = 0; d < nb; ++d) T.bs[size_t(d)] = bshape[size_t(d)] == 1 ? 0 : tv.stride[d];
      g.D = T;
      g.out_f32 = true;
      gemm(g, ds, s);
      reduce_to(dt, acc.get(), true, tv, base_of(gt), view_full(gt, rank), 1.f, s);
    };
    const Mat A = mat_of(a, nb), B = mat_of(b, nb);
    grad(ga, a, Z, transposed(B), N);
    grad(gb, b, transposed(A), Z, M);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
