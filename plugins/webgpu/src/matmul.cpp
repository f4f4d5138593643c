// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) over the one GEMM kernel.
//
// Forward: one launch; batch g of the grid is output batch g, with A/B/bias/residual/
// out/pre offsets from a table when there is more than one batch; bias, residual, pre
// and the activation are the GEMM's epilogue. Backward (one path for all three): dz =
// grad_out * act'(pre or out) (one pointwise pass into a compact scratch; grad_out itself
// for identity and the residual op), then grad_a = dz @ b^T and grad_b = a^T @ dz as
// GEMMs over transposed *views* (swapped strides, no copies), each summing the batches
// its operand was broadcast along inside the kernel; grad_bias (and grad_residual) are
// reductions of dz.
#include <initializer_list>
#include <string>

#include "ops.h"

namespace dlfuse_webgpu {
namespace {

// A matrix operand [..., R, C] read over the output's batch dims (right-aligned, stride 0
// where it is broadcast, so a bias [N] reads as [batch..., M, N]).
struct Mat {
  MatRef m;
  Dims batch;  // strides over the output's batch dims (0 where broadcast)
};

// An absent tensor (NULL) gives an empty view with zero batch strides.
Mat mat(const DLTensor* t, int brank) {
  if (!t) return Mat{MatRef{}, Dims(size_t(brank), 0)};
  const Dims al = aligned_strides(t, brank + 2);
  return Mat{MatRef{buf_of(t), elem_offset(t), al[size_t(brank)], al[size_t(brank + 1)]},
             Dims(al.begin(), al.begin() + brank)};
}

Mat transposed(const Mat& x) { return Mat{MatRef{x.m.buf, x.m.off, x.m.cs, x.m.rs}, x.batch}; }

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

bool wanted(const DLTensor* t) { return t && numel(shape_of(t)) > 0; }

const DLTensor* required_out(const dlfuse_kernel_args_t* args, int i, const char* name) {
  if (!args->outputs[i]) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string("argument '") + name + "' is NULL");
  return args->outputs[i];
}

// out = act(a @ b + bias [+ residual]) and, when given, pre = a @ b + bias: one GEMM.
void matmul_forward(Launch& l, const Call& c, const DLTensor* a, const DLTensor* b, const DLTensor* bias, const DLTensor* residual,
                    const DLTensor* out, const DLTensor* pre, int act) {
  const int brank = out->ndim - 2;
  const Dims batch(out->shape, out->shape + brank);
  const int64_t M = out->shape[brank], N = out->shape[brank + 1], K = a->shape[a->ndim - 1];
  const int64_t nb = numel(batch);
  if (M == 0 || N == 0 || nb == 0) return;
  const Mat A = mat(a, brank), B = mat(b, brank), O = mat(out, brank), Bi = mat(bias, brank),
            Re = mat(residual, brank), P = mat(pre, brank);
  std::vector<int64_t> table;  // rows as kTableHeader says, then this batch's A and B
  if (nb > 1) {
    Dims o(size_t(brank), 0);
    do {
      table.insert(table.end(), {dot(o, O.batch), dot(o, Bi.batch), dot(o, Re.batch), dot(o, P.batch),
                                 dot(o, A.batch), dot(o, B.batch)});
    } while (next_index(o, batch));
  }
  Epilogue ep;
  ep.bias = Bi.m;
  ep.residual = Re.m;
  ep.pre = P.m;
  ep.act = act;
  gemm(l, c, A.m, B.m, O.m, ep, M, N, K, nb, 1, table);
}

// The gradient of a matrix operand `op` (shape [op_batch..., R, C]) = sum over the output
// batches that map to each of its batches of X[b] @ Y[b], via one batched GEMM.
// X has `rows` rows and `inner` columns, Y `inner` rows and `cols` columns; their batch
// strides are over the output's batch dims.
void operand_grad(Launch& l, const Call& c, const DLTensor* grad, const DLTensor* op, const Dims& out_batch, const Mat& X,
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
      // Header: only C moves per batch (no bias, residual or pre in a gradient GEMM).
      table.insert(table.end(), {dot(ci, g_batch), 0, 0, 0});
      table.insert(table.end(), terms[size_t(l)].begin(), terms[size_t(l)].end());
      next_index(ci, op_batch);
    }
  }
  const MatRef G{buf_of(grad), elem_offset(grad), gst[size_t(grad->ndim - 2)], gst[size_t(grad->ndim - 1)]};
  gemm(l, c, X.m, Y.m, G, Epilogue{}, rows, cols, inner, nc, R, table);
}

// dz over out's shape: grad_out itself, or a scratch holding grad_out * act'(...).
struct Dz {
  WGPUBuffer buf;
  int64_t off;
  Dims strides;
};

// dz = grad_out * act'(src), src being the forward's out (from_out) or pre; a compact
// scratch of the launch, every element written here. For identity dz is grad_out exactly
// (g * 1), so grad_out is used in place of a copy.
Dz make_dz(Launch& l, const Call& c, const DLTensor* g, const DLTensor* src, int act, bool from_out) {
  if (act == DLFUSE_ACT_IDENTITY) return Dz{buf_of(g), elem_offset(g), strides_of(g)};
  const Dims oshape = shape_of(g);
  const Dims dzs = compact_strides(oshape);
  WGPUBuffer dz = l.scratch(uint64_t(numel(oshape)) * uint64_t(c.esize));
  const Pipeline& p = pointwise(c, "act_dz");
  for_each_block(oshape, {strides_of(g), strides_of(src), dzs}, {elem_offset(g), elem_offset(src), 0},
                 [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
                   std::vector<int32_t> prm = {int32_t(n0), int32_t(n1), int32_t(n2), act, from_out ? 1 : 0};
                   for (const ClView& w : v) push_view(prm, w);
                   pointwise_dispatch(l, p, {buf_of(g), buf_of(src), dz, nullptr, nullptr, nullptr, nullptr, nullptr},
                                      prm, n0, n1, n2);
                   return true;
                 });
  return Dz{dz, 0, dzs};
}

// Every matmul backward: grad_a = dz @ b^T, grad_b = a^T @ dz (each reduced over the batch
// dims its operand was broadcast along), and each of `sums` = reduce_to(dz, its shape).
// dz is made only when some gradient is wanted. src: the forward's out or pre (NULL for
// the residual op, whose dz is grad_out).
void matmul_backward(Launch& l, const Call& c, const DLTensor* g, const DLTensor* a, const DLTensor* b, const DLTensor* src, int act,
                     bool from_out, const DLTensor* ga, const DLTensor* gb,
                     std::initializer_list<const DLTensor*> sums) {
  bool any = wanted(ga) || wanted(gb);
  for (const DLTensor* t : sums) any = any || wanted(t);
  if (!any) return;
  const Dims oshape = shape_of(g);
  const int brank = g->ndim - 2;
  const Dims batch(oshape.begin(), oshape.begin() + brank);
  const int64_t M = oshape[size_t(brank)], N = oshape[size_t(brank + 1)], K = a->shape[a->ndim - 1];
  const Dz dz = src ? make_dz(l, c, g, src, act, from_out) : Dz{buf_of(g), elem_offset(g), strides_of(g)};
  const Mat DZ{MatRef{dz.buf, dz.off, dz.strides[size_t(brank)], dz.strides[size_t(brank + 1)]},
               Dims(dz.strides.begin(), dz.strides.begin() + brank)};
  if (wanted(ga)) operand_grad(l, c, ga, a, batch, DZ, transposed(mat(b, brank)), M, K, N);  // [M, N] @ [N, K]
  if (wanted(gb)) operand_grad(l, c, gb, b, batch, transposed(mat(a, brank)), DZ, K, N, M);  // [K, M] @ [M, N]
  for (const DLTensor* t : sums)
    if (wanted(t)) reduce_into(l, c, oshape, dz.buf, dz.off, dz.strides, false, t, 1.0f);
}

const char* const kReluFwdNames[] = {"a", "b", "bias", "out"};
const char* const kReluBwdNames[] = {"grad_out", "a", "b", "out", "grad_a", "grad_b", "grad_bias"};
const char* const kActFwdNames[] = {"a", "b", "bias", "out", "pre"};
const char* const kActBwdNames[] = {"grad_out", "a", "b", "out", "pre", "grad_a", "grad_b", "grad_bias"};
const char* const kResFwdNames[] = {"a", "b", "bias", "residual", "out"};
const char* const kResBwdNames[] = {"grad_out", "a", "b", "grad_a", "grad_b", "grad_bias", "grad_residual"};

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 3, 1, kReluFwdNames);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    matmul_forward(l, c, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), nullptr, DLFUSE_ACT_RELU);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 3, 2, kActFwdNames);
    const int act = kit::activation(args);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    matmul_forward(l, c, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), args->outputs[1], act);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 4, 1, kResFwdNames);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    matmul_forward(l, c, in[0], in[1], in[2], in[3], required_out(args, 0, "out"), nullptr, DLFUSE_ACT_IDENTITY);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 4, 3, kReluBwdNames);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Launch l(*c.dev);
    matmul_backward(l, c, in[0], in[1], in[2], in[3], DLFUSE_ACT_RELU, true, o[0], o[1], {o[2]});
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 5, 3, kActBwdNames, /* out, pre */ 0x18);
    const int act = kit::activation(args);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    const DLTensor *out = in[3], *pre = in[4];
    if (!out == !pre)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string("arguments 'out' and 'pre' are both ") +
                                                      (out ? "given" : "NULL") + "; expected exactly one of them");
    if (out && act > DLFUSE_ACT_TANH)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "argument 'out' is given with ACTIVATION " + std::to_string(act) +
                                                      "; expected IDENTITY, RELU, SIGMOID or TANH with 'out' (pass 'pre')");
    Launch l(*c.dev);
    matmul_backward(l, c, in[0], in[1], in[2], out ? out : pre, act, out != nullptr, o[0], o[1], {o[2]});
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, 3, 4, kResBwdNames);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Launch l(*c.dev);
    matmul_backward(l, c, in[0], in[1], in[2], nullptr, DLFUSE_ACT_IDENTITY, false, o[0], o[1], {o[2], o[3]});
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_webgpu
