// mlp and mlp_backward: one call of the layer kernels per layer (dlfuse::kit::mlp_forward,
// mlp_backward), what passes between layers uncaught by the caller in stream-ordered
// temporaries.
// Nothing is fused across a layer's edge: cuBLASLt's fusions for it (DRELU_BGRAD in the
// input-gradient GEMM, BGRADA in the weight-gradient GEMM) measured slower on the H200 than
// the passes they would replace (docs/performance.md, "A model").
#include <memory>
#include <vector>

#include "matmul_parts.h"

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
    Scratch scratch{cx, {}};
    return kit::mlp_backward(state, kLayers, args, scratch);
  });
}

}  // namespace dlfuse_cuda
