// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) over the one GEMM kernel; the plan (views, batch tables, the backward's
// GEMMs and reductions) is plugins/common/src/matmul_plan.h, this file its device side.
#include "matmul_entries.hpp"
#include "ops.h"

namespace dlfuse_webgpu {
namespace {

// The plan's device side (plugins/common/src/matmul_plan.h, Backend) recorded into one launch.
struct Backend {
  using Buffer = WGPUBuffer;
  Launch& l;
  const Call& c;

  WGPUBuffer buffer_of(const DLTensor* t) const { return buf_of(t); }
  void gemm(const MatRef& A, const MatRef& B, const MatRef& C, const Epilogue& ep, int64_t M, int64_t N, int64_t K,
            int64_t nbatch, int64_t R, const std::vector<int64_t>& table) {
    dlfuse_webgpu::gemm(l, c, A, B, C, ep, M, N, K, nbatch, R, table);
  }
  void reduce_into(const Dims& shape, WGPUBuffer src, int64_t off, const Dims& strides, const DLTensor* dst) {
    dlfuse_webgpu::reduce_into(l, c, shape, src, off, strides, false, dst, 1.0f);
  }
  // dz = grad_out * act'(src), src being the forward's out (from_out) or pre, into a
  // compact scratch of the launch, every element written here.
  dlfuse_plugin::Dz<WGPUBuffer> act_dz(const DLTensor* g, const DLTensor* src, int act, bool from_out) {
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
    return {dz, 0, dzs};
  }
};

// The matmul ops' entry points (plugins/common/src/matmul_entries.hpp) over this plugin's
// checks (prepare_call) and Backend.
struct MatmulPlugin {
  static constexpr const char* kName = "webgpu";
  using Call = dlfuse_webgpu::Call;
  static Call prepare(void* state, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                      const char* const* names, uint32_t optional_inputs) {
    return prepare_call(static_cast<State*>(state), args, num_inputs, num_outputs, names, optional_inputs);
  }
  template <class F>
  static void run(Call& c, F&& body) {
    Launch l(*c.dev);
    Backend be{l, c};
    body(be);
    l.submit();
  }
};
using Matmul = dlfuse_plugin::MatmulEntries<MatmulPlugin>;

}  // namespace

dlfuse_plugin::FusedOps fused_ops() { return DLFUSE_PLUGIN_FUSED_OPS(Matmul); }

}  // namespace dlfuse_webgpu
