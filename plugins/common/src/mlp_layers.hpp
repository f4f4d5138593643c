// mlp and mlp_backward (ABI 1.2) by composition, for the first-party plugins where a fused
// form does not pay (oneDNN, OpenCL, WebGPU, testref; the CUDA plugin's forward): one call of
// the plugin's own matmul_add_activation(_backward) kernel per layer. Header-only, in the
// plugins' own namespace: an op algorithm, not part of the installed plugin kit.
#ifndef DLFUSE_PLUGIN_COMMON_MLP_LAYERS_HPP_
#define DLFUSE_PLUGIN_COMMON_MLP_LAYERS_HPP_

#include <dlfuse/plugin_kit.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace dlfuse_plugin {

namespace kit = dlfuse::kit;

/* mlp and mlp_backward from a plugin's own matmul_add_activation and
 * matmul_add_activation_backward kernels, one call of each per layer, for a plugin where a
 * fused form does not pay. The registry has validated the call (dlfuse/ops.def, docs/ops.md).
 * `scratch(bytes)` gives device memory (what alloc() gives) for what passes from layer to
 * layer where the caller keeps nothing (hidden outputs not asked for, the backward's
 * gradients); it must stay valid until the kernels enqueued by the call have run (a
 * stream-ordered free, or a free after the call on a synchronous device). */
struct LayerKernels {
  dlfuse_kernel_fn_t forward;  /* the plugin's matmul_add_activation */
  dlfuse_kernel_fn_t backward; /* its matmul_add_activation_backward */
};

namespace mlp_detail {
constexpr int kMaxLayers = 7;

inline int layers(const DLTensor* const* w) {
  int n = 0;
  while (n < kMaxLayers && w[n]) ++n;
  return n;
}

/* One layer's kernel call with the outer call's stream and error buffer; a failure's
 * message gets the layer's index appended. */
inline dlfuse_status_t call_layer(void* state, dlfuse_kernel_fn_t fn, const dlfuse_kernel_args_t* outer, const char* op,
                                  const DLTensor* const* in, int32_t ni, DLTensor* const* out, int32_t no, int64_t act,
                                  int64_t tf32, int layer) {
  const dlfuse_attr_t attrs[2] = {{DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_INT64, {act}},
                                  {DLFUSE_ATTR_ALLOW_TF32, DLFUSE_ATTR_INT64, {tf32}}};
  dlfuse_kernel_args_t a = *outer;
  a.op = op;
  a.inputs = in;
  a.num_inputs = ni;
  a.outputs = out;
  a.num_outputs = no;
  a.attrs = attrs;
  a.num_attrs = 2;
  const dlfuse_status_t s = fn(state, nullptr, &a);
  if (s != DLFUSE_STATUS_OK && outer->err && outer->err_size) {
    const std::string msg = std::string(outer->err) + " (mlp layer " + std::to_string(layer) + ")";
    std::snprintf(outer->err, outer->err_size, "%s", msg.c_str());
  }
  return s;
}

/* A [rows, cols] tensor of x's device and dtype in a scratch buffer. */
struct ScratchMatrix {
  int64_t shape[2];
  DLTensor t;
  ScratchMatrix(void* data, const DLTensor* like, int64_t rows, int64_t cols)
      : shape{rows, cols}, t{data, like->device, 2, like->dtype, shape, nullptr, 0} {}
  ScratchMatrix(const ScratchMatrix&) = delete;
  ScratchMatrix& operator=(const ScratchMatrix&) = delete;
};

/* What both directions read of a call: x, the weights, how many layers, the attributes, and
 * the bytes of one scratch matrix (x's rows by the widest hidden layer). */
struct Stack {
  const DLTensor* x;
  const DLTensor* const* w;
  int n;
  int64_t act, last, tf32;
  size_t scratch_bytes;
  int64_t act_of(int layer) const { return layer == n - 1 ? last : act; }
};

inline Stack stack_of(const dlfuse_kernel_args_t* args, int x_input, int w0_input) {
  Stack s{args->inputs[x_input],
          args->inputs + w0_input,
          0,
          kit::attr_int(args, DLFUSE_ATTR_ACTIVATION, -1),
          kit::attr_int(args, DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ACT_IDENTITY),
          kit::attr_int(args, DLFUSE_ATTR_ALLOW_TF32, 0),
          0};
  s.n = layers(s.w);
  int64_t widest = 0;
  for (int i = 0; i + 1 < s.n; ++i) widest = std::max<int64_t>(widest, s.w[i]->shape[1]);
  s.scratch_bytes = size_t(s.x->shape[0]) * size_t(widest) * size_t((s.x->dtype.bits * s.x->dtype.lanes + 7) / 8);
  return s;
}
}  // namespace mlp_detail

/* mlp: inputs x, w0..w6, b0..b6; outputs out, h0..h5 (hidden outputs not given go to
 * scratch). A layer's failure returns its status and message. */
template <class Scratch>
dlfuse_status_t mlp_forward(void* state, const LayerKernels& k, const dlfuse_kernel_args_t* args, Scratch&& scratch) {
  kit::check_call(args, DLFUSE_ARITY(mlp), true, args->inputs[0]->device.device_type, DLFUSE_OPTIONAL_INPUTS(mlp));
  const mlp_detail::Stack s = mlp_detail::stack_of(args, DLFUSE_INPUT(mlp, x), DLFUSE_INPUT(mlp, w0));
  void* buf[2] = {nullptr, nullptr};
  std::unique_ptr<mlp_detail::ScratchMatrix> kept[2];
  const DLTensor* prev = s.x;
  for (int i = 0; i < s.n; ++i) {
    DLTensor* h = i == s.n - 1 ? args->outputs[DLFUSE_OUTPUT(mlp, out)] : args->outputs[DLFUSE_OUTPUT(mlp, h0) + i];
    if (!h) {  // a hidden output the caller does not keep
      const int slot = i % 2;
      if (!buf[slot] && s.scratch_bytes) buf[slot] = scratch(s.scratch_bytes);
      kept[slot].reset(new mlp_detail::ScratchMatrix(buf[slot], s.x, s.x->shape[0], s.w[i]->shape[1]));
      h = &kept[slot]->t;
    }
    const DLTensor* layer_in[3] = {prev, s.w[i], args->inputs[DLFUSE_INPUT(mlp, b0) + i]};
    DLTensor* layer_out[2] = {h, nullptr};
    if (auto st = mlp_detail::call_layer(state, k.forward, args, DLFUSE_OP_MATMUL_ADD_ACTIVATION, layer_in, 3,
                                         layer_out, 2, s.act_of(i), s.tf32, i))
      return st;
    prev = h;
  }
  return DLFUSE_STATUS_OK;
}

/* mlp_backward: inputs grad_out, x, w0..w6, h0..h5, out; outputs grad_x, grad_w0..6,
 * grad_b0..6. From the last layer down; a layer's input gradient goes to scratch (grad_x
 * for layer 0), and layers below every gradient asked for are skipped. */
template <class Scratch>
dlfuse_status_t mlp_backward(void* state, const LayerKernels& k, const dlfuse_kernel_args_t* args, Scratch&& scratch) {
  kit::check_call(args, DLFUSE_ARITY(mlp_backward), false, args->inputs[0]->device.device_type,
                  DLFUSE_OPTIONAL_INPUTS(mlp_backward));
  const DLTensor* const* in = args->inputs;
  DLTensor* const* out = args->outputs;
  const mlp_detail::Stack s = mlp_detail::stack_of(args, DLFUSE_INPUT(mlp_backward, x), DLFUSE_INPUT(mlp_backward, w0));
  const DLTensor* x = s.x;
  const DLTensor* const* w = s.w;
  const int n = s.n;
  auto wanted = [&](int i) {  // a gradient of layer i (or grad_x, for i = -1) is asked for
    if (i < 0) return out[DLFUSE_OUTPUT(mlp_backward, grad_x)] != nullptr;
    return out[DLFUSE_OUTPUT(mlp_backward, grad_w0) + i] || out[DLFUSE_OUTPUT(mlp_backward, grad_b0) + i];
  };
  int lowest = n;  // the lowest layer whose backward runs
  for (int i = n - 1; i >= -1; --i)
    if (wanted(i)) lowest = i < 0 ? 0 : i;
  const int64_t M = x->shape[0];
  void* buf[2] = {nullptr, nullptr};
  std::unique_ptr<mlp_detail::ScratchMatrix> grads[2];  // gradients of layer outputs, ping-pong
  const DLTensor* g = in[DLFUSE_INPUT(mlp_backward, grad_out)];
  for (int i = n - 1; i >= lowest; --i) {
    const DLTensor* saved = i == n - 1 ? in[DLFUSE_INPUT(mlp_backward, out)] : in[DLFUSE_INPUT(mlp_backward, h0) + i];
    const int64_t a_act = s.act_of(i);
    // IDENTITY's derivative reads no value: any tensor of the shape stands in for an absent out.
    if (!saved && a_act == DLFUSE_ACT_IDENTITY) saved = g;
    DLTensor* ga = out[DLFUSE_OUTPUT(mlp_backward, grad_x)];
    if (i > lowest) {
      const int slot = i % 2;
      if (!buf[slot] && s.scratch_bytes) buf[slot] = scratch(s.scratch_bytes);
      grads[slot].reset(new mlp_detail::ScratchMatrix(buf[slot], x, M, w[i]->shape[0]));
      ga = &grads[slot]->t;
    } else if (i > 0) {
      ga = nullptr;  // nothing below this layer is asked for
    }
    const DLTensor* layer_in[5] = {g, i ? in[DLFUSE_INPUT(mlp_backward, h0) + i - 1] : x, w[i], saved, nullptr};
    DLTensor* layer_out[3] = {ga, out[DLFUSE_OUTPUT(mlp_backward, grad_w0) + i],
                              out[DLFUSE_OUTPUT(mlp_backward, grad_b0) + i]};
    if (auto st = mlp_detail::call_layer(state, k.backward, args, DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, layer_in, 5,
                                         layer_out, 3, a_act, s.tf32, i))
      return st;
    g = ga;
  }
  return DLFUSE_STATUS_OK;
}

/* mlp_backward's scratch on a CPU plugin (kernels complete before they return): host
 * memory aligned to 64 bytes, freed with this object. */
class HostScratch {
 public:
  void* operator()(size_t bytes) {
    blocks_.emplace_back(static_cast<char*>(::operator new(bytes ? bytes : 1, std::align_val_t(64))));
    return blocks_.back().get();
  }

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::vector<std::unique_ptr<char, Free>> blocks_;
};

}  // namespace dlfuse_plugin

#endif
