// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) over the one GEMM kernel; the plan (views, batch tables, the backward's
// GEMMs and reductions) is plugins/common/src/matmul_plan.h, this file its device side.
#include "matmul_entries.hpp"
#include "ops.h"

namespace dlfuse_opencl {
namespace {

// The plan's device side (plugins/common/src/matmul_plan.h, Backend) on one call's queue.
struct Backend {
  using Buffer = cl_mem;
  Call& c;
  MemRef dz_holder;  // act_dz's scratch, released once the call has enqueued its work

  cl_mem buffer_of(const DLTensor* t) const { return mem_of(t); }
  void gemm(const MatRef& A, const MatRef& B, const MatRef& C, const Epilogue& ep, int64_t M, int64_t N, int64_t K,
            int64_t nbatch, int64_t R, const std::vector<int64_t>& table) {
    dlfuse_opencl::gemm(c, A, B, C, ep, M, N, K, nbatch, R, table);
  }
  void reduce_into(const Dims& shape, cl_mem src, int64_t off, const Dims& strides, const DLTensor* dst) {
    dlfuse_opencl::reduce_into(c, shape, src, off, strides, false, dst, 1.0f);
  }
  // dz = grad_out * act'(src), src being the forward's out (from_out) or pre, into a
  // compact scratch, every element written here.
  dlfuse_plugin::Dz<cl_mem> act_dz(const DLTensor* g, const DLTensor* src, int act, bool from_out) {
    const Dims oshape = shape_of(g);
    const Dims dzs = compact_strides(oshape);
    dz_holder.m = scratch(*c.dev, size_t(numel(oshape)) * size_t(c.esize));
    KernelRef k(c.dev->kernel(c.prec, "act_dz"));
    for_each_block(oshape, {strides_of(g), strides_of(src), dzs}, {elem_offset(g), elem_offset(src), 0},
                   [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
                     set_args(k.k, mem_of(g), v[0], mem_of(src), v[1], dz_holder.m, v[2], cl_long(n0), cl_long(n1),
                              cl_long(n2), cl_int(act), cl_int(from_out ? 1 : 0));
                     size_t global[3] = {size_t(n2), size_t(n1), size_t(n0)}, local[3];
                     pointwise_local(*c.dev, n2, n1, local);
                     enqueue(c.queue, k.k, global, local, "act_dz");
                     return true;
                   });
    return {dz_holder.m, 0, dzs};
  }
};

// The matmul ops' entry points (plugins/common/src/matmul_entries.hpp) over this plugin's
// checks (prepare_call) and Backend.
struct MatmulPlugin {
  static constexpr const char* kName = "opencl";
  using Call = dlfuse_opencl::Call;
  static Call prepare(void* state, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                      const char* const* names, uint32_t optional_inputs) {
    return prepare_call(static_cast<State*>(state), args, num_inputs, num_outputs, names, optional_inputs);
  }
  template <class F>
  static void run(Call& c, F&& body) {
    Backend be{c, {}};
    body(be);  // enqueued on the call's queue as it goes
  }
};
using Matmul = dlfuse_plugin::MatmulEntries<MatmulPlugin>;

}  // namespace

dlfuse_plugin::FusedOps fused_ops() { return DLFUSE_PLUGIN_FUSED_OPS(Matmul); }

}  // namespace dlfuse_opencl
