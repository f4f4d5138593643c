// matmul_add_relu forward and backward over the one GEMM kernel.
//
// Forward: one launch; batch g of the grid is output batch g, with A/B/bias/out offsets
// from a table when there is more than one batch. Backward: dz = relu's select of
// grad_out (one pointwise pass into a compact scratch), then grad_a = dz @ b^T and
// grad_b = a^T @ dz as GEMMs over transposed *views* (swapped strides, no copies), each
// summing the batches its operand was broadcast along inside the kernel; grad_bias is a
// reduction of dz.
#include "ops.h"

namespace dlfuse_opencl {
namespace {

// A matrix operand [..., R, C] read over the output's batch dims.
struct Mat {
  cl_mem mem;
  int64_t off, rs, cs;
  Dims batch;  // strides over the output's batch dims (0 where broadcast)
};

Mat mat(const DLTensor* t, int brank) {
  const Dims st = strides_of(t);
  const Dims al = aligned_strides(t, brank + 2);
  Mat m{mem_of(t), elem_offset(t), st[size_t(t->ndim - 2)], st[size_t(t->ndim - 1)],
        Dims(al.begin(), al.begin() + brank)};
  return m;
}

int64_t dot(const Dims& a, const Dims& b) {
  int64_t s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

bool next_index(Dims& idx, const Dims& shape) {
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    if (++idx[size_t(d)] < shape[size_t(d)]) return true;
    idx[size_t(d)] = 0;
  }
  return false;
}

const char* const kFwdNames[] = {"a", "b", "bias", "out"};
const char* const kBwdNames[] = {"grad_out", "a", "b", "out", "grad_a", "grad_b", "grad_bias"};

// The gradient of a matrix operand `op` (shape [op_batch..., R, C]) = sum over the output
// batches that map to each of its batches of X[b] @ Y[b], via one batched GEMM.
// X = (mem, off, batch strides over out batch, rs, cs) with R rows and `inner` columns,
// Y likewise with `inner` rows and C columns.
void operand_grad(Call& c, const DLTensor* grad, const DLTensor* op, const Dims& out_batch, const Mat& X,
                  const Mat& Y, int64_t rows, int64_t cols, int64_t inner) {
  const int brank = int(out_batch.size());
  const int obr = op->ndim - 2;  // the operand's own batch rank
  const Dims op_batch(op->shape, op->shape + obr);
  const Dims gst = strides_of(grad);
  const Dims g_batch(gst.begin(), gst.begin() + obr);
  const int64_t nc = numel(op_batch);  // one GEMM output per operand batch
  const int64_t nb = numel(out_batch);
  if (nc == 0) return;
  const int64_t R = nb / nc;  // each operand batch gets the same number of terms
  std::vector<int64_t> table;
  if (nc > 1 || R > 1) {
    std::vector<std::vector<int64_t>> terms(static_cast<size_t>(nc));
    if (nb > 0) {
      Dims o(size_t(brank), 0);
      do {
        int64_t lin = 0;  // the operand batch this output batch belongs to (row-major)
        for (int j = 0; j < obr; ++j) {
          const int i = j + (brank - obr);
          lin = lin * op_batch[size_t(j)] + (op_batch[size_t(j)] == 1 ? 0 : o[size_t(i)]);
        }
        terms[size_t(lin)].push_back(dot(o, X.batch));
        terms[size_t(lin)].push_back(dot(o, Y.batch));
      } while (next_index(o, out_batch));
    }
    Dims ci(size_t(obr), 0);
    for (int64_t l = 0; l < nc; ++l) {
      if (int64_t(terms[size_t(l)].size()) != 2 * R)
        throw Error(DLFUSE_STATUS_INTERNAL, "batch reduction table is uneven");
      table.push_back(dot(ci, g_batch));
      table.push_back(0);
      table.insert(table.end(), terms[size_t(l)].begin(), terms[size_t(l)].end());
      next_index(ci, op_batch);
    }
  }
  const int64_t rk = gst[size_t(grad->ndim - 2)], ck = gst[size_t(grad->ndim - 1)];
  gemm(c, X.mem, X.off, X.rs, X.cs, Y.mem, Y.off, Y.rs, Y.cs, mem_of(grad), elem_offset(grad), rk, ck, nullptr, 0, 0, 0,
       0, rows, cols, inner, nc, R, table);
}

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 3, 1, kFwdNames);
    const DLTensor *a = args->inputs[0], *b = args->inputs[1], *bias = args->inputs[2];
    const DLTensor* out = args->outputs[0];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "argument 'out' is NULL");
    const int brank = out->ndim - 2;
    const Dims batch(out->shape, out->shape + brank);
    const int64_t M = out->shape[brank], N = out->shape[brank + 1], K = a->shape[a->ndim - 1];
    const int64_t nb = numel(batch);
    if (M == 0 || N == 0 || nb == 0) return DLFUSE_STATUS_OK;
    const Mat A = mat(a, brank), B = mat(b, brank), O = mat(out, brank);
    const Dims bs = aligned_strides(bias, brank + 2);
    const Dims bias_batch(bs.begin(), bs.begin() + brank);
    std::vector<int64_t> table;
    if (nb > 1) {
      Dims o(size_t(brank), 0);
      do {
        table.insert(table.end(), {dot(o, O.batch), dot(o, bias_batch), dot(o, A.batch), dot(o, B.batch)});
      } while (next_index(o, batch));
    }
    gemm(c, A.mem, A.off, A.rs, A.cs, B.mem, B.off, B.rs, B.cs, O.mem, O.off, O.rs, O.cs, mem_of(bias),
         elem_offset(bias), bs[size_t(brank)], bs[size_t(brank + 1)], 3, M, N, K, nb, 1, table);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 4, 3, kBwdNames);
    const DLTensor *g = args->inputs[0], *a = args->inputs[1], *b = args->inputs[2], *out = args->inputs[3];
    const DLTensor *ga = args->outputs[0], *gb = args->outputs[1], *gbias = args->outputs[2];
    const auto wanted = [](const DLTensor* t) { return t && numel(shape_of(t)) > 0; };
    if (!wanted(ga) && !wanted(gb) && !wanted(gbias)) return DLFUSE_STATUS_OK;
    const int rank = out->ndim, brank = rank - 2;
    const Dims oshape = shape_of(out);
    const Dims batch(oshape.begin(), oshape.begin() + brank);
    const int64_t M = oshape[size_t(brank)], N = oshape[size_t(brank + 1)], K = a->shape[a->ndim - 1];

    // dz = where(out > 0 or NaN, grad_out, 0), compact [batch..., M, N].
    const Dims dzs = compact_strides(oshape);
    MemRef dz(scratch(*c.dev, size_t(numel(oshape)) * size_t(c.esize)));
    {
      KernelRef k(c.dev->kernel(c.prec, "relu_select"));
      for_each_block(oshape, {strides_of(g), strides_of(out), dzs}, {elem_offset(g), elem_offset(out), 0},
                     [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
                       set_args(k.k, mem_of(g), v[0], mem_of(out), v[1], dz.m, v[2], cl_long(n0), cl_long(n1),
                                cl_long(n2));
                       size_t global[3] = {size_t(n2), size_t(n1), size_t(n0)}, local[3];
                       pointwise_local(*c.dev, n2, n1, local);
                       enqueue(c.queue, k.k, global, local, "relu_select");
                       return true;
                     });
    }
    const Mat DZ{dz.m, 0, N, 1, Dims(dzs.begin(), dzs.begin() + brank)};
    if (wanted(ga)) {  // grad_a [.., M, K] = dz [M, N] @ b^T [N, K]
      const Mat B = mat(b, brank);
      const Mat BT{B.mem, B.off, B.cs, B.rs, B.batch};
      operand_grad(c, ga, a, batch, DZ, BT, M, K, N);
    }
    if (wanted(gb)) {  // grad_b [.., K, N] = a^T [K, M] @ dz [M, N]
      const Mat A = mat(a, brank);
      const Mat AT{A.mem, A.off, A.cs, A.rs, A.batch};
      operand_grad(c, gb, b, batch, AT, DZ, K, N, M);
    }
    if (wanted(gbias)) reduce_into(c, oshape, dz.m, 0, dzs, false, gbias, 1.0f);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_opencl
