// matmul_add_relu forward and backward on cuBLASLt (gemm.h, matmul_parts.h).
//
// Forward: bias [N] (or [M, 1] for a transposed output) goes through the BIAS epilogue; any
// other bias is broadcast into the output first and added with beta = 1. relu runs in the
// epilogue when the chosen kernel keeps NaN (gemm_lt.cpp checks), else in our own pass.
// Backward: dZ = where(out > 0 or NaN, grad_out, 0) by our kernel; grad_a = dZ b^T and
// grad_b = a^T dZ by cuBLASLt straight into the gradients when nothing is reduced, else in
// float into a temporary that our reduce_to kernel sums over the broadcast batch dims.
#include "matmul_parts.h"

namespace dlfuse_cuda {

namespace {

// relu over D in place (NaN kept): vectorized when D is compact.
void relu_in_place(CallContext& cx, const GemmTarget& t) {
  if (is_compact(t.view))
    relu_compact(cx.dt, t.D.base, t.view.numel(), cx.stream);
  else
    copy_view(cx.dt, t.D.base, t.view, t.D.base, t.view, 1, cx.stream);
}

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_relu));
    const DLTensor *a = args->inputs[0], *b = args->inputs[1], *bias = args->inputs[2];
    DLTensor* out = args->outputs[0];
    if (!out) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "out is NULL");
    if (a->ndim < 2 || b->ndim < 2 || out->ndim < 2)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "matmul operands need at least 2 dims");
    if (numel(out) == 0) return DLFUSE_STATUS_OK;
    const std::vector<int64_t> oshape(out->shape, out->shape + out->ndim);
    if (a->shape[a->ndim - 1] == 0) {  // K = 0: relu(bias)
      copy_view(cx.dt, base_of(bias), view_over(bias, oshape), base_of(out), own_view(out), 1, cx.stream);
      return DLFUSE_STATUS_OK;
    }
    const GemmTarget t(cx, out);
    Gemm g = gemm_into(cx, a, b, t, read_tf32(args));
    add_bias(cx, g, bias, t);
    g.act = EpiAct::kRelu;
    if (!gemm(g, *cx.ds, cx.stream)) {
      // No NaN-keeping RELU epilogue for this problem: bias-only epilogue, then our relu.
      g.act = EpiAct::kNone;
      gemm(g, *cx.ds, cx.stream);
      relu_in_place(cx, t);
    }
    t.copy_back(cx.dt, cx.stream);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(matmul_add_relu_backward));
    const DLTensor *gout = args->inputs[0], *a = args->inputs[1], *b = args->inputs[2], *out = args->inputs[3];
    DLTensor *ga = args->outputs[0], *gb = args->outputs[1], *gbias = args->outputs[2];
    // dZ = relu'(out) * grad_out and its column sums in one pass, then the two GEMMs: the
    // path of matmul_add_activation's backward from out.
    activation_backward(cx, read_tf32(args), DLFUSE_ACT_RELU, true, gout, out, a, b, ga, gb, gbias);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
