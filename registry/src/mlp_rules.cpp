// mlp and mlp_backward: a call's layers are those whose weight is given (w0..w{L-1}); each
// layer's tensors have the shapes its weight gives, and the tensors of the layers that do not
// exist are NULL or empty ([0]: what inference gives them, so that a binding allocating
// every output by inference passes them on).
#include "mlp_rules.hpp"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "activations.hpp"
#include "error.hpp"
#include "format.hpp"
#include "shape_checks.hpp"

namespace dlfuse {
namespace {

constexpr int kMaxLayers = 7;
const char* const kW[kMaxLayers] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6"};
const char* const kB[kMaxLayers] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6"};
const char* const kH[kMaxLayers - 1] = {"h0", "h1", "h2", "h3", "h4", "h5"};
const char* const kGW[kMaxLayers] = {"grad_w0", "grad_w1", "grad_w2", "grad_w3", "grad_w4", "grad_w5", "grad_w6"};
const char* const kGB[kMaxLayers] = {"grad_b0", "grad_b1", "grad_b2", "grad_b3", "grad_b4", "grad_b5", "grad_b6"};

// Layer i maps width[i] features to width[i + 1]; M rows.
struct Layers {
  int n = 0;
  int64_t M = 0;
  int64_t width[kMaxLayers + 1] = {};
};

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// The layers of x and w[0..7); "" or what is wrong, naming the argument.
std::string layers_of(const DLTensor* x, const DLTensor* const* w, Layers* L) {
  if (x->ndim != 2) return format("argument 'x': ndim is %d; expected 2 ([M, K])", x->ndim);
  L->M = x->shape[0];
  L->width[0] = x->shape[1];
  for (int i = 0; i < kMaxLayers; ++i) {
    if (!w[i]) continue;
    if (L->n != i)
      return format("argument '%s' is given but '%s' is NULL; expected the weights of layers 0..L-1 without a gap",
                    kW[i], kW[L->n]);
    if (w[i]->ndim != 2) return format("argument '%s': ndim is %d; expected 2 ([K, N])", kW[i], w[i]->ndim);
    if (w[i]->shape[0] != L->width[i])
      return format("argument '%s': shape[0] (K) is %lld; expected %lld, %s's shape[1]", kW[i],
                    static_cast<long long>(w[i]->shape[0]), static_cast<long long>(L->width[i]),
                    i == 0 ? "x" : kW[i - 1]);
    L->width[++L->n] = w[i]->shape[1];
  }
  return "";
}

dlfuse_status_t layers_or_fail(const char* op, const TensorView& x, const TensorView* w, Layers* L) {
  const DLTensor* ws[kMaxLayers];
  for (int i = 0; i < kMaxLayers; ++i) ws[i] = w[i].t;
  const std::string why = layers_of(x.t, ws, L);
  if (why.empty()) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: %s", op, why.c_str());
}

// A tensor of a layer that does not exist: NULL or empty ([0]).
dlfuse_status_t expect_unused(const char* op, const char* arg, const TensorView& v, int layer) {
  if (!present(v) || (v.t->ndim == 1 && v.t->shape[0] == 0)) return DLFUSE_STATUS_OK;
  const std::string why = "layer " + std::to_string(layer) + " does not exist: its weight is NULL";
  const int64_t empty[1] = {0};
  return expect_shape(op, arg, v, empty, 1, why.c_str());
}

// Hidden layer i's output [M, width[i + 1]] (i < n - 1; required by the backward), else
// unused.
dlfuse_status_t expect_hidden(const char* op, const Layers& L, int i, const TensorView& v, bool required) {
  if (i >= L.n - 1) return expect_unused(op, kH[i], v, i + 1);
  if (!required && !present(v)) return DLFUSE_STATUS_OK;
  if (auto s = expect_present(op, kH[i], v, "the forward's output of a hidden layer")) return s;
  const int64_t shape[2] = {L.M, L.width[i + 1]};
  return expect_shape(op, kH[i], v, shape, 2, "[M, N] of the layer: x's shape[0], its weight's shape[1]");
}

dlfuse_status_t expect_last(const char* op, const char* arg, const Layers& L, const TensorView& v) {
  const int64_t shape[2] = {L.M, L.width[L.n]};
  return expect_shape(op, arg, v, shape, 2, "[M, N] of the last layer: x's shape[0], its weight's shape[1]");
}

dlfuse_status_t write_shape(int32_t* ndim, int64_t* shape, std::initializer_list<int64_t> dims) {
  *ndim = int32_t(dims.size());
  int32_t d = 0;
  for (int64_t v : dims) shape[d++] = v;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t callback_error(const std::string& why, char* err, size_t err_size) {
  if (err && err_size) std::snprintf(err, err_size, "%s", why.c_str());
  return DLFUSE_STATUS_INVALID_ARGUMENT;
}

}  // namespace

dlfuse_status_t check_mlp(const char* op, const TensorView* in, const TensorView* out) {
  Layers L;
  if (auto s = layers_or_fail(op, in[DLFUSE_INPUT(mlp, x)], in + DLFUSE_INPUT(mlp, w0), &L)) return s;
  for (int i = 0; i < kMaxLayers; ++i) {
    const TensorView& b = in[DLFUSE_INPUT(mlp, b0) + i];
    if (i >= L.n) {
      if (auto s = expect_absent(op, kB[i], b, "its layer has no weight")) return s;
      continue;
    }
    if (auto s = expect_present(op, kB[i], b, "the bias of a layer")) return s;
    const int64_t n[1] = {L.width[i + 1]};
    if (auto s = expect_shape(op, kB[i], b, n, 1, "[N] of its layer: its weight's shape[1]")) return s;
  }
  if (auto s = expect_last(op, "out", L, out[DLFUSE_OUTPUT(mlp, out)])) return s;
  for (int i = 0; i < kMaxLayers - 1; ++i)
    if (auto s = expect_hidden(op, L, i, out[DLFUSE_OUTPUT(mlp, h0) + i], false)) return s;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_mlp_backward(const char* op, const TensorView* in, const TensorView* out) {
  Layers L;
  const TensorView& x = in[DLFUSE_INPUT(mlp_backward, x)];
  if (auto s = layers_or_fail(op, x, in + DLFUSE_INPUT(mlp_backward, w0), &L)) return s;
  if (auto s = expect_last(op, "grad_out", L, in[DLFUSE_INPUT(mlp_backward, grad_out)])) return s;
  for (int i = 0; i < kMaxLayers - 1; ++i)
    if (auto s = expect_hidden(op, L, i, in[DLFUSE_INPUT(mlp_backward, h0) + i], true)) return s;
  const TensorView& fwd_out = in[DLFUSE_INPUT(mlp_backward, out)];
  if (present(fwd_out))
    if (auto s = expect_last(op, "out", L, fwd_out)) return s;
  const TensorView& gx = out[DLFUSE_OUTPUT(mlp_backward, grad_x)];
  if (present(gx))
    if (auto s = expect_shape(op, "grad_x", gx, x.t->shape, x.t->ndim, "x's shape")) return s;
  for (int i = 0; i < kMaxLayers; ++i) {
    const TensorView& gw = out[DLFUSE_OUTPUT(mlp_backward, grad_w0) + i];
    const TensorView& gb = out[DLFUSE_OUTPUT(mlp_backward, grad_b0) + i];
    if (i >= L.n) {
      if (auto s = expect_unused(op, kGW[i], gw, i)) return s;
      if (auto s = expect_unused(op, kGB[i], gb, i)) return s;
      continue;
    }
    const DLTensor* w = in[DLFUSE_INPUT(mlp_backward, w0) + i].t;
    if (present(gw))
      if (auto s = expect_shape(op, kGW[i], gw, w->shape, 2, "its weight's shape")) return s;
    const int64_t n[1] = {L.width[i + 1]};
    if (present(gb))
      if (auto s = expect_shape(op, kGB[i], gb, n, 1, "[N] of its layer: its weight's shape[1]")) return s;
  }
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t form_mlp_backward(const OpSpec&, const char* op, const TensorView* in, const TensorView*,
                                  const dlfuse_attr_t* canonical) {
  const int64_t act = canonical[dlfuse_mlp_backward_attr_ACTIVATION].value.i64;
  const int64_t last = canonical[dlfuse_mlp_backward_attr_OUTPUT_ACTIVATION].value.i64;
  const bool hidden = present(in[DLFUSE_INPUT(mlp_backward, w1)]);
  const char* const keys[2] = {"ACTIVATION", "OUTPUT_ACTIVATION"};
  const int64_t acts[2] = {act, last};
  for (int k = hidden ? 0 : 1; k < 2; ++k)
    if (!derivative_from_out(acts[k]))
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "%s: attribute %s is %s; expected IDENTITY, RELU, SIGMOID or TANH (the backward reads each "
                  "layer's output, and the derivative of %s is not a function of it)",
                  op, keys[k], activation_name(acts[k]), activation_name(acts[k]));
  if (last != DLFUSE_ACT_IDENTITY && !present(in[DLFUSE_INPUT(mlp_backward, out)]))
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'out' is NULL; expected the forward's out (OUTPUT_ACTIVATION %s reads it)", op,
                activation_name(last));
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t mlp_output_shape(const DLTensor* const* inputs, int32_t, const dlfuse_attr_t*, int32_t, int32_t output,
                                 int32_t* ndim, int64_t* shape, char* err, size_t err_size) {
  Layers L;
  const std::string why = layers_of(inputs[DLFUSE_INPUT(mlp, x)], inputs + DLFUSE_INPUT(mlp, w0), &L);
  if (!why.empty()) return callback_error(why, err, err_size);
  if (output == DLFUSE_OUTPUT(mlp, out)) return write_shape(ndim, shape, {L.M, L.width[L.n]});
  const int i = output - DLFUSE_OUTPUT(mlp, h0);
  if (i < L.n - 1) return write_shape(ndim, shape, {L.M, L.width[i + 1]});
  return write_shape(ndim, shape, {0});
}

dlfuse_status_t mlp_backward_output_shape(const DLTensor* const* inputs, int32_t, const dlfuse_attr_t*, int32_t,
                                          int32_t output, int32_t* ndim, int64_t* shape, char* err, size_t err_size) {
  Layers L;
  const DLTensor* const* w = inputs + DLFUSE_INPUT(mlp_backward, w0);
  const std::string why = layers_of(inputs[DLFUSE_INPUT(mlp_backward, x)], w, &L);
  if (!why.empty()) return callback_error(why, err, err_size);
  const bool weight = output < DLFUSE_OUTPUT(mlp_backward, grad_b0);
  const int i = output - (weight ? DLFUSE_OUTPUT(mlp_backward, grad_w0) : DLFUSE_OUTPUT(mlp_backward, grad_b0));
  if (i >= L.n) return write_shape(ndim, shape, {0});
  if (weight) return write_shape(ndim, shape, {w[i]->shape[0], w[i]->shape[1]});
  return write_shape(ndim, shape, {L.width[i + 1]});
}

}  // namespace dlfuse
