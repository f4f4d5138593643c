// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) over the one GEMM kernel; the plan (views, batch tables, the backward's
// GEMMs and reductions) is plugins/common/src/matmul_plan.h, this file its device side.
#include "ops.h"

namespace dlfuse_opencl {
namespace {

using dlfuse_plugin::matmul_backward;
using dlfuse_plugin::matmul_forward;
using dlfuse_plugin::required_out;

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

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c =
        prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_relu), kit::arg_names::matmul_add_relu);
    const DLTensor* const* in = args->inputs;
    Backend be{c, {}};
    matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), nullptr, DLFUSE_ACT_RELU);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_activation),
                          kit::arg_names::matmul_add_activation);
    const int act = kit::activation(args);
    const DLTensor* const* in = args->inputs;
    Backend be{c, {}};
    matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), args->outputs[1], act);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_residual),
                          kit::arg_names::matmul_add_residual);
    const DLTensor* const* in = args->inputs;
    Backend be{c, {}};
    matmul_forward(be, in[0], in[1], in[2], in[3], required_out(args, 0, "out"), nullptr, DLFUSE_ACT_IDENTITY);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_relu_backward),
                          kit::arg_names::matmul_add_relu_backward);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Backend be{c, {}};
    matmul_backward(be, in[0], in[1], in[2], in[3], DLFUSE_ACT_RELU, true, o[0], o[1], {o[2]});
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_activation_backward),
                          kit::arg_names::matmul_add_activation_backward,
                          DLFUSE_OPTIONAL_INPUTS(matmul_add_activation_backward));
    const int act = kit::activation(args);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    const DLTensor *out = in[3], *pre = in[4];
    check_act_backward_form(out, pre, act);
    Backend be{c, {}};
    matmul_backward(be, in[0], in[1], in[2], out ? out : pre, act, out != nullptr, o[0], o[1], {o[2]});
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_residual_backward),
                          kit::arg_names::matmul_add_residual_backward);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Backend be{c, {}};
    matmul_backward(be, in[0], in[1], in[2], nullptr, DLFUSE_ACT_IDENTITY, false, o[0], o[1], {o[2], o[3]});
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_opencl
