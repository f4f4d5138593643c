// mlp and mlp_backward. The forward is one call of the layer kernel per layer
// (dlfuse::dlfuse_plugin::mlp_forward), what passes between layers uncaught by the caller in
// stream-ordered temporaries. The backward runs from the last layer down on each layer's
// dZ (compact): the top layer's from the output gradient in one pass (act_grad_rows), each
// lower layer's from the step above, with the bias gradient's column sums: that layer's
// input-gradient GEMM with the ReLU gradient in its epilogue (dgrad_relu.h: bfloat16,
// sm_90), one pass where that layer is 1 wide (act_grad_rows again), else the GEMM and the
// activation-gradient pass. One launch finishes every layer's column sums. cuBLASLt's
// own fusions for that (DRELU_BGRAD, BGRADA) measured slower on the H200 than the passes
// they would replace (docs/performance.md, "A model").
#include <cstdint>
#include <memory>
#include <vector>

#include "matmul_parts.h"
#include "mlp_layers.hpp"
#if DLFUSE_CUDA_CUTLASS
#include "dgrad_relu.h"
#endif

namespace dlfuse_cuda {
namespace {

constexpr dlfuse_plugin::LayerKernels kLayers = {matmul_add_activation, matmul_add_activation_backward};

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
  dlfuse_plugin::mlp_detail::Stack s;
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

// The bias gradients whose column sums the layer steps below left, finished together at the
// end of the call (one launch instead of one a layer).
struct BiasSums {
  std::vector<std::unique_ptr<Temp>> buffers;
  std::vector<ColsumJob> jobs;
  // A float [rows, K] buffer for the column sums of gbias where it is a vector, else NULL
  // (gbias absent, or another shape: reduce_into then).
  float* claim(CallContext& cx, int64_t rows, int64_t K, DLTensor* gbias) {
    if (!gbias || gbias->ndim != 1 || rows * K == 0) return nullptr;
    buffers.emplace_back(new Temp(*cx.ds, size_t(rows * K) * sizeof(float), cx.stream));
    float* p = static_cast<float*>(buffers.back()->get());
    jobs.push_back({p, int(rows), K, base_of(gbias), elem_stride(gbias, 0)});
    return p;
  }
  void drop_last() {
    buffers.pop_back();
    jobs.pop_back();
  }
};

// The step from layer i's dZ to layer i - 1's, where one kernel takes it whole.
struct Edge {
  const void* dz;  // layer i's dZ, compact [M, N]
  int64_t M;
  const DLTensor* w;  // layer i's weight [K, N]
  const DLTensor* h;  // layer i - 1's output [M, K]
  int64_t act;        // layer i - 1's activation
  void* dz_below;     // layer i - 1's dZ, compact [M, K]
  DLTensor* gbias;    // layer i - 1's bias gradient (may be NULL)
};

// The row stride of a 2-D t whose rows are contiguous, else -1.
int64_t row_pitch(const DLTensor* t) {
  if (t->ndim != 2 || (t->shape[1] > 1 && elem_stride(t, 1) != 1)) return -1;
  return t->shape[0] > 1 ? elem_stride(t, 0) : t->shape[1];
}

#if DLFUSE_CUDA_CUTLASS
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Layer i's input-gradient GEMM with layer i - 1's ReLU gradient and bias column sums in
// its epilogue (dgrad_relu.h). False, with nothing enqueued, where it does not apply.
bool gemm_edge(CallContext& cx, const Edge& e, BiasSums& sums) {
  // CUTLASS's problem shape is int.
  if (e.act != DLFUSE_ACT_RELU || cx.dt != DType::kBF16 || cx.ds->cc != 90 || e.M > INT32_MAX) return false;
  DgradRelu p;
  p.M = e.M;
  p.K = e.w->shape[0];
  p.N = e.w->shape[1];
  if (elem_stride(e.w, 1) == 1) {
    p.ldw = elem_stride(e.w, 0);
  } else if (elem_stride(e.w, 0) == 1) {  // weight.t() of an [N, K] weight
    p.ldw = elem_stride(e.w, 1);
    p.w_col_major = true;
  } else {
    return false;
  }
  p.ldh = row_pitch(e.h);
  if (p.K % 8 || p.N % 8 || p.ldw % 8 || p.ldh < 0 || p.ldh % 8) return false;
  if (!aligned16(base_of(e.w)) || !aligned16(base_of(e.h))) return false;
  p.w = base_of(e.w);
  p.h = base_of(e.h);
  p.dy = e.dz;
  p.lddy = p.N;
  p.dz = e.dz_below;
  p.lddz = p.K;
  // The epilogue's per-tile column sums serve where they are packed (K a multiple of the tile's).
  if (dgrad_relu_partial_cols(p.K) == p.K) p.partials = sums.claim(cx, dgrad_relu_partial_rows(e.M), p.K, e.gbias);
  std::unique_ptr<Temp> ws;
  const cudaError_t err = dgrad_relu(
      p,
      [&](size_t bytes) {
        ws = std::make_unique<Temp>(*cx.ds, bytes, cx.stream);
        return ws->get();
      },
      cx.stream);
  if (err == cudaErrorNotSupported && p.partials) sums.drop_last();
  if (err == cudaErrorNotSupported) return false;
  DLF_CUDA(err);
  if (!p.partials) reduce_into(cx, e.dz_below, {e.M, p.K}, e.gbias);
  return true;
}
#else
bool gemm_edge(CallContext&, const Edge&, BiasSums&) { return false; }
#endif

// A 1-wide layer i: its input gradient is an outer product, taken in one pass with layer
// i - 1's activation gradient and bias column sums (act_grad_rows).
bool outer_edge(CallContext& cx, const Edge& e, BiasSums& sums) {
  ActGradRows p;
  p.ldh = row_pitch(e.h);
  if (e.w->shape[1] != 1 || p.ldh < 0) return false;
  p.M = e.M;
  p.K = e.w->shape[0];
  p.g = e.dz;
  p.ldg = 1;
  p.w = base_of(e.w);
  p.w_stride = elem_stride(e.w, 0);
  p.h = base_of(e.h);
  p.dz = e.dz_below;
  p.act = int(e.act);
  p.partial = sums.claim(cx, act_grad_rows_chunks(cx.dt, p), p.K, e.gbias);
  act_grad_rows(cx.dt, p, cx.stream);
  if (!p.partial) reduce_into(cx, e.dz_below, {e.M, p.K}, e.gbias);
  return true;
}

// The top layer's dZ from the output gradient g and its saved output, with its bias column
// sums finished in the call's one finishing launch. False, with nothing enqueued, where the
// rows are not contiguous (activation_dz takes any layout).
bool top_dz(CallContext& cx, const DLTensor* g, const DLTensor* out, int64_t act, void* dz, DLTensor* gbias,
            BiasSums& sums) {
  ActGradRows p;
  if (act == DLFUSE_ACT_IDENTITY) out = nullptr;  // its derivative reads no output
  p.ldg = row_pitch(g);
  p.ldh = out ? row_pitch(out) : 0;
  if (p.ldg < 0 || p.ldh < 0 || (!out && act != DLFUSE_ACT_IDENTITY)) return false;
  p.M = g->shape[0];
  p.K = g->shape[1];
  p.g = base_of(g);
  p.h = out ? base_of(out) : nullptr;
  p.dz = dz;
  p.act = int(act);
  p.partial = sums.claim(cx, act_grad_rows_chunks(cx.dt, p), p.K, gbias);
  act_grad_rows(cx.dt, p, cx.stream);
  if (!p.partial) reduce_into(cx, dz, {p.M, p.K}, gbias);
  return true;
}

// Layer i - 1's dZ (and bias gradient) straight from layer i's dZ, where one kernel does it;
// false, with nothing enqueued, where the layers take the GEMM and the pass.
bool edge(CallContext& cx, const Edge& e, BiasSums& sums) {
  if (!e.h || e.M < 1) return false;
  return gemm_edge(cx, e, sums) || outer_edge(cx, e, sums);
}

void backward(CallContext& cx, const Call& c) {
  const dlfuse_plugin::mlp_detail::Stack& s = c.s;
  const int lowest = c.lowest();
  const int64_t M = s.x->shape[0];
  const size_t esize = size_t(dsize(cx.dt));
  std::unique_ptr<Temp> dz, gbuf;  // layer i's dZ; its output gradient where no edge step made dZ
  std::unique_ptr<dlfuse_plugin::mlp_detail::ScratchMatrix> gmat;
  const DLTensor* g = c.args->inputs[MLPB_IN(grad_out)];
  BiasSums sums;
  bool have_dz = false;
  for (int i = s.n - 1; i >= lowest; --i) {
    const std::vector<int64_t> shape{M, s.w[i]->shape[1]};
    if (!have_dz) {
      const DLTensor* saved = c.output_of(i);
      dz.reset(new Temp(*cx.ds, size_t(M * shape[1]) * esize, cx.stream));
      if (!top_dz(cx, g, saved, s.act_of(i), dz->get(), c.grad_b(i), sums)) {
        // IDENTITY's derivative reads no value: any tensor of the shape stands in for an absent out.
        if (!saved && s.act_of(i) == DLFUSE_ACT_IDENTITY) saved = g;
        activation_dz(cx, int(s.act_of(i)), true, g, saved, shape, dz->get(), c.grad_b(i));
      }
    }
    const Mat dzm = compact_mat(dz->get(), shape);
    operand_grads(cx, s.tf32, dzm, shape, c.input_of(i), s.w[i], nullptr, c.grad_w(i));
    if (i == 0) operand_grads(cx, s.tf32, dzm, shape, s.x, s.w[0], c.grad_x(), nullptr);
    if (i == lowest) break;
    const int64_t K = s.w[i]->shape[0];
    std::unique_ptr<Temp> below(new Temp(*cx.ds, size_t(M * K) * esize, cx.stream));
    have_dz =
        edge(cx, {dz->get(), M, s.w[i], c.output_of(i - 1), s.act_of(i - 1), below->get(), c.grad_b(i - 1)}, sums);
    if (have_dz) {
      dz = std::move(below);
      continue;
    }
    gmat.reset(new dlfuse_plugin::mlp_detail::ScratchMatrix(below->get(), s.x, M, K));
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
    return dlfuse_plugin::mlp_forward(state, kLayers, args, scratch);
  });
}

dlfuse_status_t mlp_backward(void* state, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&]() -> dlfuse_status_t {
    CallContext cx(state, args, DLFUSE_ARITY(mlp_backward), DLFUSE_OPTIONAL_INPUTS(mlp_backward));
    kit::check_call(args, DLFUSE_ARITY(mlp_backward), false, kDLCUDA, DLFUSE_OPTIONAL_INPUTS(mlp_backward));
    const Call c{args, dlfuse_plugin::mlp_detail::stack_of(args, MLPB_IN(x), MLPB_IN(w0))};
    backward(cx, c);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_cuda
