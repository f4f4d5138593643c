// The six matmul entry points (matmul_add_relu, matmul_add_activation, matmul_add_residual and
// their backwards) of the plugins built on device_plugin.hpp, written once over matmul_plan.h:
// what each op reads of a call, in which form its backward runs, and the plan. A plugin says
// how a call is checked and how its work reaches the device.
//
// P is a struct of statics:
//   kName                                  the plugin's name, the prefix of its messages
//   Call                                   what prepare() found: the device, the precision
//   prepare(state, args, num_inputs, num_outputs, names, optional_inputs) -> Call
//                                          the call's checks (devices, buffers, the stream)
//   run(Call&, F&& body)                   body(backend) on a matmul_plan.h Backend for the
//                                          call, then whatever submits the recorded work
// A plugin instantiates MatmulEntries<P> once, in the file that defines P::run.
#ifndef DLFUSE_PLUGIN_COMMON_MATMUL_ENTRIES_HPP_
#define DLFUSE_PLUGIN_COMMON_MATMUL_ENTRIES_HPP_

#include <dlfuse/plugin_kit.hpp>

#include "matmul_plan.h"

namespace dlfuse_plugin {

template <class P>
struct MatmulEntries {
  using Call = typename P::Call;

  static dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c = P::prepare(state, args, DLFUSE_ARITY(matmul_add_relu), dlfuse::kit::arg_names::matmul_add_relu, 0);
      const DLTensor* const* in = args->inputs;
      P::run(c, [&](auto& be) {
        matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), nullptr, DLFUSE_ACT_RELU);
      });
    });
  }

  static dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c = P::prepare(state, args, DLFUSE_ARITY(matmul_add_activation),
                          dlfuse::kit::arg_names::matmul_add_activation, 0);
      const int act = dlfuse::kit::activation(args);
      const DLTensor* const* in = args->inputs;
      P::run(c, [&](auto& be) {
        matmul_forward(be, in[0], in[1], in[2], nullptr, required_out(args, 0, "out"), args->outputs[1], act);
      });
    });
  }

  static dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c =
          P::prepare(state, args, DLFUSE_ARITY(matmul_add_residual), dlfuse::kit::arg_names::matmul_add_residual, 0);
      const DLTensor* const* in = args->inputs;
      P::run(c, [&](auto& be) {
        matmul_forward(be, in[0], in[1], in[2], in[3], required_out(args, 0, "out"), nullptr, DLFUSE_ACT_IDENTITY);
      });
    });
  }

  static dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c = P::prepare(state, args, DLFUSE_ARITY(matmul_add_relu_backward),
                          dlfuse::kit::arg_names::matmul_add_relu_backward, 0);
      const DLTensor* const* in = args->inputs;
      DLTensor* const* o = args->outputs;
      P::run(c, [&](auto& be) {
        matmul_backward(be, in[0], in[1], in[2], in[3], DLFUSE_ACT_RELU, true, o[0], o[1], {o[2]});
      });
    });
  }

  // The backward from `out` (identity, relu, sigmoid, tanh) or from `pre` (any activation).
  static dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c = P::prepare(state, args, DLFUSE_ARITY(matmul_add_activation_backward),
                          dlfuse::kit::arg_names::matmul_add_activation_backward,
                          DLFUSE_OPTIONAL_INPUTS(matmul_add_activation_backward));
      const int act = dlfuse::kit::activation(args);
      const DLTensor* const* in = args->inputs;
      DLTensor* const* o = args->outputs;
      const DLTensor *out = in[3], *pre = in[4];
      check_act_backward_form(out, pre, act);
      P::run(c, [&](auto& be) {
        matmul_backward(be, in[0], in[1], in[2], out ? out : pre, act, out != nullptr, o[0], o[1], {o[2]});
      });
    });
  }

  static dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
    return dlfuse::kit::guarded(P::kName, args, [&] {
      Call c = P::prepare(state, args, DLFUSE_ARITY(matmul_add_residual_backward),
                          dlfuse::kit::arg_names::matmul_add_residual_backward, 0);
      const DLTensor* const* in = args->inputs;
      DLTensor* const* o = args->outputs;
      P::run(c, [&](auto& be) {
        matmul_backward(be, in[0], in[1], in[2], nullptr, DLFUSE_ACT_IDENTITY, false, o[0], o[1], {o[2], o[3]});
      });
    });
  }
};

}  // namespace dlfuse_plugin

#endif
