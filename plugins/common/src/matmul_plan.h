// The host side of the matmul ops for plugins whose one GEMM kernel reads strided matrices
// through a batch offset table and applies the epilogue itself (OpenCL, WebGPU): operand
// views, the batch tables, and the backward's plan. What touches the device (the GEMM
// launch, the dz pass, the reductions) is the plugin's, reached through a `Backend`.
//
// Forward: one GEMM; batch g of the grid is output batch g, with A/B/bias/residual/out/pre
// offsets from a table when there is more than one batch; bias, residual, pre and the
// activation are the GEMM's epilogue. Backward (one path for all three ops): dz = grad_out
// * act'(pre or out) (the backend's pointwise pass into a compact scratch; grad_out itself
// for identity and the residual op), then grad_a = dz @ b^T and grad_b = a^T @ dz as GEMMs
// over transposed *views* (swapped strides, no copies), each summing the batches its
// operand was broadcast along inside the kernel; grad_bias (and grad_residual) are
// reductions of dz.
#ifndef DLFUSE_PLUGIN_COMMON_MATMUL_PLAN_H_
#define DLFUSE_PLUGIN_COMMON_MATMUL_PLAN_H_

#include <dlfuse/plugin_kit.hpp>

#include <initializer_list>
#include <vector>

#include "layout.h"

namespace dlfuse_plugin {

// A matrix of one GEMM batch: element (r, c) is buf[off + r * rs + c * cs].
template <class Buffer>
struct MatRef {
  Buffer buf = nullptr;
  int64_t off = 0, rs = 0, cs = 0;
};

// What the GEMM adds to the product before it stores: bias and residual when their buf is
// set, pre = the sum so far when its buf is set, then out = act(pre) (act a
// dlfuse_activation_t; identity for a plain product).
template <class Buffer>
struct Epilogue {
  MatRef<Buffer> bias, residual, pre;
  int act = DLFUSE_ACT_IDENTITY;
};

// Batch table rows: [offC, offBias, offRes, offPre, (offA, offB) x R], the offsets added
// to the base views for batch z (TAB_HDR in the plugins' GEMM kernels).
constexpr size_t kTableHeader = 4;

// dz over out's shape: grad_out itself, or a scratch holding grad_out * act'(...).
template <class Buffer>
struct Dz {
  Buffer buf;
  int64_t off;
  Dims strides;
};

// The buffer-free parts of the plan (matmul_plan.cpp).
bool wanted(const DLTensor* t);
const DLTensor* required_out(const dlfuse_kernel_args_t* args, int i, const char* name);
// matmul_add_activation_backward reads dz's source from exactly one of out and pre, and
// from out only where act' is a function of act's output (identity, relu, sigmoid, tanh).
void check_act_backward_form(const DLTensor* out, const DLTensor* pre, int act);
// Forward table: one row per output batch (row-major over `batch`); each Dims is that
// operand's strides over the output's batch dims (0 where broadcast).
std::vector<int64_t> forward_table(const Dims& batch, const Dims& out, const Dims& bias, const Dims& residual,
                                   const Dims& pre, const Dims& a, const Dims& b);
// Gradient table of an operand with batch shape `op_batch` (grad's batch strides
// `g_batch`): one row per operand batch, summing the R = numel(out_batch) / numel(op_batch)
// output batches that map to it; x and y are the GEMM operands' batch strides. Empty when
// there is a single batch and a single term.
std::vector<int64_t> grad_table(const Dims& out_batch, const Dims& op_batch, const Dims& g_batch, const Dims& x,
                                const Dims& y, int64_t R);

// A matrix operand [..., R, C] read over the output's batch dims (right-aligned, stride 0
// where it is broadcast, so a bias [N] reads as [batch..., M, N]).
template <class Buffer>
struct Mat {
  MatRef<Buffer> m;
  Dims batch;  // strides over the output's batch dims (0 where broadcast)
};

// An absent tensor (NULL) gives an empty view with zero batch strides.
template <class Backend>
Mat<typename Backend::Buffer> mat(const Backend& be, const DLTensor* t, int brank) {
  if (!t) return {{}, Dims(size_t(brank), 0)};
  const Dims al = aligned_strides(t, brank + 2);
  return {{be.buffer_of(t), elem_offset(t), al[size_t(brank)], al[size_t(brank + 1)]},
          Dims(al.begin(), al.begin() + brank)};
}

template <class Buffer>
Mat<Buffer> transposed(const Mat<Buffer>& x) {
  return {{x.m.buf, x.m.off, x.m.cs, x.m.rs}, x.batch};
}

// Backend (one per call) provides:
//   using Buffer = <the runtime's buffer handle>;
//   Buffer buffer_of(const DLTensor*) const;
//   void gemm(const MatRef<Buffer>& A, const MatRef<Buffer>& B, const MatRef<Buffer>& C,
//             const Epilogue<Buffer>&, int64_t M, int64_t N, int64_t K, int64_t nbatch, int64_t R,
//             const std::vector<int64_t>& table);  // C = epilogue(sum over r < R of A_r @ B_r)
//   Dz<Buffer> act_dz(const DLTensor* g, const DLTensor* src, int act, bool from_out);
//       // grad_out * act'(src) into a compact scratch that lives until the call ends
//   void reduce_into(const Dims& shape, Buffer src, int64_t off, const Dims& strides, const DLTensor* dst);
//       // dst = reduce_to(src), src a tensor of grad's dtype

// out = act(a @ b + bias [+ residual]) and, when given, pre = a @ b + bias: one GEMM.
template <class Backend>
void matmul_forward(Backend& be, const DLTensor* a, const DLTensor* b, const DLTensor* bias, const DLTensor* residual,
                    const DLTensor* out, const DLTensor* pre, int act) {
  const int brank = out->ndim - 2;
  const Dims batch(out->shape, out->shape + brank);
  const int64_t M = out->shape[brank], N = out->shape[brank + 1], K = a->shape[a->ndim - 1];
  const int64_t nb = numel(batch);
  if (M == 0 || N == 0 || nb == 0) return;
  const auto A = mat(be, a, brank), B = mat(be, b, brank), O = mat(be, out, brank), Bi = mat(be, bias, brank),
             Re = mat(be, residual, brank), P = mat(be, pre, brank);
  std::vector<int64_t> table;
  if (nb > 1) table = forward_table(batch, O.batch, Bi.batch, Re.batch, P.batch, A.batch, B.batch);
  Epilogue<typename Backend::Buffer> ep;
  ep.bias = Bi.m;
  ep.residual = Re.m;
  ep.pre = P.m;
  ep.act = act;
  be.gemm(A.m, B.m, O.m, ep, M, N, K, nb, 1, table);
}

// The gradient of a matrix operand `op` (shape [op_batch..., R, C]) = sum over the output
// batches that map to each of its batches of X[b] @ Y[b], via one batched GEMM.
// X has `rows` rows and `inner` columns, Y `inner` rows and `cols` columns; their batch
// strides are over the output's batch dims.
template <class Backend, class Buffer = typename Backend::Buffer>
void operand_grad(Backend& be, const DLTensor* grad, const DLTensor* op, const Dims& out_batch, const Mat<Buffer>& X,
                  const Mat<Buffer>& Y, int64_t rows, int64_t cols, int64_t inner) {
  const int obr = op->ndim - 2;  // the operand's own batch rank
  const Dims op_batch(op->shape, op->shape + obr);
  const Dims gst = strides_of(grad);
  const Dims g_batch(gst.begin(), gst.begin() + obr);
  const int64_t nc = numel(op_batch);  // one GEMM output per operand batch
  if (nc == 0) return;
  const int64_t R = numel(out_batch) / nc;  // each operand batch gets the same number of terms
  const std::vector<int64_t> table = grad_table(out_batch, op_batch, g_batch, X.batch, Y.batch, R);
  const MatRef<Buffer> G{be.buffer_of(grad), elem_offset(grad), gst[size_t(grad->ndim - 2)],
                         gst[size_t(grad->ndim - 1)]};
  be.gemm(X.m, Y.m, G, Epilogue<Buffer>{}, rows, cols, inner, nc, R, table);
}

// Every matmul backward: grad_a = dz @ b^T, grad_b = a^T @ dz (each reduced over the batch
// dims its operand was broadcast along), and each of `sums` = reduce_to(dz, its shape).
// dz is made only when some gradient is wanted. src: the forward's out (from_out) or pre
// (NULL for the residual op, whose dz is grad_out). For identity dz is grad_out exactly
// (g * 1), so grad_out is used in place of a copy.
template <class Backend>
void matmul_backward(Backend& be, const DLTensor* g, const DLTensor* a, const DLTensor* b, const DLTensor* src, int act,
                     bool from_out, const DLTensor* ga, const DLTensor* gb,
                     std::initializer_list<const DLTensor*> sums) {
  using Buffer = typename Backend::Buffer;
  bool any = wanted(ga) || wanted(gb);
  for (const DLTensor* t : sums) any = any || wanted(t);
  if (!any) return;
  const Dims oshape = shape_of(g);
  const int brank = g->ndim - 2;
  const Dims batch(oshape.begin(), oshape.begin() + brank);
  const int64_t M = oshape[size_t(brank)], N = oshape[size_t(brank + 1)], K = a->shape[a->ndim - 1];
  const Dz<Buffer> dz = src && act != DLFUSE_ACT_IDENTITY ? be.act_dz(g, src, act, from_out)
                                                          : Dz<Buffer>{be.buffer_of(g), elem_offset(g), strides_of(g)};
  const Mat<Buffer> DZ{{dz.buf, dz.off, dz.strides[size_t(brank)], dz.strides[size_t(brank + 1)]},
                       Dims(dz.strides.begin(), dz.strides.begin() + brank)};
  if (wanted(ga)) operand_grad(be, ga, a, batch, DZ, transposed(mat(be, b, brank)), M, K, N);  // [M, N] @ [N, K]
  if (wanted(gb)) operand_grad(be, gb, b, batch, transposed(mat(be, a, brank)), DZ, K, N, M);  // [K, M] @ [M, N]
  for (const DLTensor* t : sums)
    if (wanted(t)) be.reduce_into(oshape, dz.buf, dz.off, dz.strides, t);
}

}  // namespace dlfuse_plugin

#endif
