// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) over the one GEMM kernel; the plan (views, batch tables, the backward's
// GEMMs and reductions) is plugins/common/src/matmul_plan.h, this file its device side.
#include "ops.h"

namespace dlfuse_webgpu {
namespace {

using dlfuse_plugin::matmul_backward;
using dlfuse_plugin::matmul_forward;
using dlfuse_plugin::required_out;

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

}  // namespace

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c =
        prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_relu), kit::arg_names::matmul_add_relu);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), nullptr, DLFUSE_ACT_RELU);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_activation),
                          kit::arg_names::matmul_add_activation);
    const int act = kit::activation(args);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), args->outputs[1], act);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_residual),
                          kit::arg_names::matmul_add_residual);
    const DLTensor* const* in = args->inputs;
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_forward(be, in[0], in[1], in[2], in[3], required_out(args, 0, "out"), nullptr, DLFUSE_ACT_IDENTITY);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_relu_backward),
                          kit::arg_names::matmul_add_relu_backward);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_backward(be, in[0], in[1], in[2], in[3], DLFUSE_ACT_RELU, true, o[0], o[1], {o[2]});
    l.submit();
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
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_backward(be, in[0], in[1], in[2], out ? out : pre, act, out != nullptr, o[0], o[1], {o[2]});
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(matmul_add_residual_backward),
                          kit::arg_names::matmul_add_residual_backward);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* o = args->outputs;
    Launch l(*c.dev);
    Backend be{l, c};
    matmul_backward(be, in[0], in[1], in[2], nullptr, DLFUSE_ACT_IDENTITY, false, o[0], o[1], {o[2], o[3]});
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_webgpu
