#include "elementwise_plan.h"

#include <string>

namespace dlfuse_plugin {

namespace {
static_assert(DLFUSE_INPUT(add_mul_activation_backward, out) == 4 &&
              DLFUSE_NUM_INPUTS(add_mul_activation_backward) == 5);
constexpr const char* const* kBwd = dlfuse::kit::arg_names::add_mul_activation_backward;
// ABI 1.0's four-input form: the names without input `out`.
constexpr const char* kBwdNames10[] = {kBwd[0], kBwd[1], kBwd[2], kBwd[3], kBwd[5], kBwd[6], kBwd[7]};
}  // namespace

AddMulBackward add_mul_backward_form(const dlfuse_kernel_args_t* args) {
  AddMulBackward f;
  const bool five = !args || args->num_inputs != 4;
  f.num_inputs =
      five ? int(DLFUSE_NUM_INPUTS(add_mul_activation_backward)) : int(DLFUSE_BASE_INPUTS(add_mul_activation_backward));
  f.names = five ? kBwd : kBwdNames10;
  return f;
}

void read_add_mul_backward(const dlfuse_kernel_args_t* args, AddMulBackward& f) {
  const auto bad = [](const std::string& m) { throw dlfuse::kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, m); };
  f.g = args->inputs[0];
  f.x = args->inputs[1];
  f.y = args->inputs[2];
  f.b = args->inputs[3];
  f.out = f.num_inputs == 5 ? args->inputs[4] : nullptr;
  for (int i = 0; i < 3; ++i) f.grads[i] = args->outputs[i];
  f.act = dlfuse::kit::activation(args);
  f.mult = float(dlfuse::kit::multiplier(args));
  if (f.out) {
    if (f.x || f.y || f.b) bad("x, y, bias, out: expected x, y and bias, or out, got all four");
    if (f.act > DLFUSE_ACT_TANH)
      bad("out: expected IDENTITY, RELU, SIGMOID or TANH with out (pass x, y and bias), got ACTIVATION " +
          std::to_string(f.act));
  } else {
    const char* names[3] = {"x", "y", "bias"};
    const DLTensor* t[3] = {f.x, f.y, f.b};
    for (int i = 0; i < 3; ++i)
      if (!t[i]) bad(std::string(names[i]) + ": expected the forward's input (or out instead), got NULL");
  }
  f.src = f.out ? f.out : f.x;
}

GradRoute route_grads(const DLTensor* const grads[3], const Dims& oshape) {
  const int rank = int(oshape.size());
  GradRoute r;
  for (int i = 0; i < 3; ++i) {
    const DLTensor* t = grads[i];
    if (!t || numel(shape_of(t)) == 0) continue;
    if (aligned_shape(t, rank) == oshape)
      r.direct |= 1 << i;
    else
      r.reduce[i] = true;
  }
  return r;
}

void input_views(const DLTensor* g, const DLTensor* x, const DLTensor* y, const DLTensor* b, const Dims& oshape,
                 std::vector<Dims>& strides, std::vector<int64_t>& offs) {
  const int rank = int(oshape.size());
  const Dims none(size_t(rank), 0);
  strides = {strides_of(g), aligned_strides(x, rank), y ? aligned_strides(y, rank) : none,
             b ? aligned_strides(b, rank) : none};
  offs = {elem_offset(g), elem_offset(x), y ? elem_offset(y) : 0, b ? elem_offset(b) : 0};
}

}  // namespace dlfuse_plugin
