// mlp and mlp_backward. The forward is one call of the layer kernel per layer
// (dlfuse::kit::mlp_forward), what passes between layers uncaught by the caller in
// stream-ordered temporaries. The backward runs from the last layer down on each layer's
// dZ (compact): the activation-gradient pass makes it from the layer's output gradient,
// unless the input-gradient GEMM of the layer above made it in its epilogue, with the bias
// gradient's partial sums (dgrad_relu.h: ReLU layers, bfloat16, sm_90). cuBLASLt's own fusions
// for that (DRELU_BGRAD, BGRADA) measured slower on the H200 than the passes they would
// replace (docs/performance.md, "A model").
#include <cstdint>
#include <memory>
#include <vector>

#include "matmul_parts.h"
#if DLFUSE_CUDA_CUTLASS
#include "dgrad_relu.h"
#endif

namespace dlfuse_cuda {
namespace {

constexpr kit::LayerKernels kLayers = {matmul_add_activation, matmul_add_activation_backward};

// Stream-ordered temporaries on the call's device, freed when the call returns.
struct Scratch {
  CallContext& cx;
  std::vector<std::unique_ptr<Temp>> temps;
  void* operator()(size_t bytes) {
    temps.emplace_back(new Temp(*cx.ds, bytes, cx.stream));
    return temps.back()->get();
  }
};

#define MLPB_IN(name) DLFUSE_INPUT(mlp_backward, name)
#define MLPB_OUT(name) DLFUSE_OUTPUT(mlp_backward, name)

// What one mlp_backward call reads: its tensors by layer.
struct Call {
  const dlfuse_kernel_args_t* args;
  kit::mlp_detail::Stack s;
  const DLTensor* input_of(int i) const { return i ? args->inputs[MLPB_IN(h0) + i - 1] : s.x; }
  const DLTensor* output_of(int i) const {
    return i == s.n - 1 ? args->inputs[MLPB_IN(out)] : args->inputs[MLPB_IN(h0) + i];
  }
  DLTensor* grad_w(int i) const { return args->outputs[MLPB_OUT(grad_w0) + i]; }
  DLTensor* grad_b(int i) const { return args->outputs[MLPB_OUT(grad_b0) + i]; }
  DLTensor* grad_x() const { return args->outputs[MLPB_OUT(grad_x)]; }
  // The lowest layer whose backward runs: below it no gradient is asked for.
  int lowest() const {
    int low = s.n;
    for (int i = s.n - 1; i >= 0; --i)
      if (grad_w(i) || grad_b(i)) low = i;
    return grad_x() ? 0 : low;
  }
};

// The bias gradients whose column sums the fused GEMMs left, finished together at the end
// of the call (one launch instead of one a layer).
struct BiasSums {
  std::vector<std::unique_ptr<Temp>> buffers;
  std::vector<ColsumJob> jobs;
};

#if DLFUSE_CUDA_CUTLASS
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The row stride of a 2-D t whose rows are contiguous, else -1.
int64_t row_pitch(const DLTensor* t) {
  if (t->ndim != 2 || (t->shape[1] > 1 && elem_stride(t, 1) != 1)) return -1;
  return t->shape[0] > 1 ? elem_stride(t, 0) : t->shape[1];
}

// dZ of layer i - 1 (into dz_below, [M, K]) and its bias gradient (or the column sums that
// `sums` finishes) from layer i's dZ (dz, [M, N]) in one GEMM; w is layer i's weight
// [K, N], h layer i - 1's output. False, with nothing enqueued, where the epilogue does not
// apply. DLFUSE_CUDA_FUSED_MLP=0 turns it off.
bool fused_dgrad(CallContext& cx, const void* dz, int64_t M, const DLTensor* w, const DLTensor* h, int64_t act,
                 void* dz_below, DLTensor* gbias, BiasSums& sums) {
  static const bool on = env_enabled("DLFUSE_CUDA_FUSED_MLP");
  if (!on || !h || act != DLFUSE_ACT_RELU || cx.dt != DType::kBF16 || cx.ds->cc != 90) return false;
  DgradRelu p;
  p.M = M;
  p.K = w->shape[0];
  p.N = w->shape[1];
  if (elem_stride(w, 1) == 1) {
    p.ldw = elem_stride(w, 0);
  } else if (elem_stride(w, 0) == 1) {  // weight.t() of an [N, K] weight
    p.ldw = elem_stride(w, 1);
    p.w_col_major = true;
  } else {
    return false;
  }
  p.ldh = row_pitch(h);
  if (M < 1 || p.K % 8 || p.N % 8 || p.ldw % 8 || p.ldh < 0 || p.ldh % 8) return false;
  if (!aligned16(base_of(w)) || !aligned16(base_of(h))) return false;
  p.w = base_of(w);
  p.h = base_of(h);
  p.dy = dz;
  p.lddy = p.N;
  p.dz = dz_below;
  p.lddz = p.K;
  p.sm_count = cx.ds->sms;
  // The bias gradient from the epilogue's per-tile column sums where they are packed (K a
  // multiple of the tile's), else one column-sum pass over dz_below.
  const bool partials = gbias && gbias->ndim == 1 && dgrad_relu_partial_cols(p.K) == p.K;
  const int64_t parts = dgrad_relu_partial_rows(M);
  std::unique_ptr<Temp> buf(new Temp(*cx.ds, partials ? size_t(parts * p.K) * sizeof(float) : 0, cx.stream));
  p.partials = static_cast<float*>(buf->get());
  Temp ws(*cx.ds, dgrad_relu_workspace(p), cx.stream);
  const cudaError_t e = dgrad_relu(p, ws.get(), cx.stream);
  if (e == cudaErrorNotSupported) return false;
  DLF_CUDA(e);
  if (partials) {
    sums.jobs.push_back({p.partials, int(parts), p.K, base_of(gbias), elem_stride(gbias, 0)});
    sums.buffers.push_back(std::move(buf));
  } else {
    reduce_into(cx, dz_below, {M, p.K}, gbias);
  }
  return true;
}
#else
bool fused_dgrad(CallContext&, const void*, int64_t, const DLTensor*, const DLTensor*, int64_t, void*, DLTensor*,
                 BiasSums&) {
  return false;
}
#endif

void backward(CallContext& cx, const Call& c) {
  const kit::mlp_detail::Stack& s = c.s;
  const int lowest = c.lowest();
  const int64_t M = s.x->shape[0];
  const size_t esize = size_t(dsize(cx.dt));
  std::unique_ptr<Temp> dz, gbuf;  // layer i's dZ; its output gradient when no epilogue made dZ
  std::unique_ptr<kit::mlp_detail::ScratchMatrix> gmat;
  const DLTensor* g = c.args->inputs[MLPB_IN(grad_out)];
  BiasSums sums;
  bool have_dz = false;
  for (int i = s.n - 1; i >= lowest; --i) {
    const std::vector<int64_t> shape{M, s.w[i]->shape[1]};
    if (!have_dz) {
      const DLTensor* saved = c.output_of(i);
      // IDENTITY's derivative reads no value: any tensor of the shape stands in for an absent out.
      if (!saved && s.act_of(i) == DLFUSE_ACT_IDENTITY) saved = g;
      dz.reset(new Temp(*cx.ds, size_t(M * shape[1]) * esize, cx.stream));
      activation_dz(cx, int(s.act_of(i)), true, g, saved, shape, dz->get(), c.grad_b(i));
    }
    const Mat dzm = compact_mat(dz->get(), shape);
    operand_grads(cx, s.tf32, dzm, shape, c.input_of(i), s.w[i], nullptr, c.grad_w(i));
    if (i == 0) operand_grads(cx, s.tf32, dzm, shape, s.x, s.w[0], c.grad_x(), nullptr);
    if (i == lowest) break;
    const int64_t K = s.w[i]->shape[0];
    std::unique_ptr<Temp> below(new Temp(*cx.ds, size_t(M * K) * esize, cx.stream));
    have_dz = fused_dgrad(cx, dz->get(), M, s.w[i], c.output_of(i - 1), s.act_of(i - 1), below->get(), c.grad_b(i - 1),
                          sums);
    if (have_dz) {
      dz = std::move(below);
      continue;
    }
    gmat.reset(new kit::mlp_detail::ScratchMatrix(below->get(), s.x, M, K));
    operand_grads(cx, s.tf32, dzm, shape, c.input_of(i), s.w[i], &gmat->t, nullptr);
    gbuf = std::move(below);
    g = &gmat->t;
  }
  finish_colsum_jobs(cx.dt, sums.jobs.data(), int(sums.jobs.size()), cx.stream);
}

}  // namespace

dlfuse_status_t mlp(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(mlp), DLFUSE_OPTIONAL_INPUTS(mlp));
    Scratch scratch{cx, {}};
    return kit::mlp_forward(state, kLayers, args, scratch);
  });
}

dlfuse_status_t mlp_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(mlp_backward), DLFUSE_OPTIONAL_INPUTS(mlp_backward));
    kit::check_call(args, DLFUSE_ARITY(mlp_backward), false, kDLCUDA, DLFUSE_OPTIONAL_INPUTS(mlp_backward));
    const Call c{args, kit::mlp_detail::stack_of(args, MLPB_IN(x), MLPB_IN(w0))};
    backward(cx, c);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
