#include "op_case.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "dtypes.h"

namespace dlfuse_conformance {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kMatmul: return DLFUSE_OP_MATMUL_ADD_RELU;
    case OpKind::kMatmulBackward: return DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD;
    case OpKind::kAddMul: return DLFUSE_OP_ADD_MUL_ACTIVATION;
    case OpKind::kAddMulBackward: return DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD;
    case OpKind::kMatmulAct: return DLFUSE_OP_MATMUL_ADD_ACTIVATION;
    case OpKind::kMatmulActBackward: return DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD;
    case OpKind::kMatmulResidual: return DLFUSE_OP_MATMUL_ADD_RESIDUAL;
    case OpKind::kMatmulResidualBackward: return DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD;
  }
  return "?";
}

bool is_matmul_op(OpKind op) { return op != OpKind::kAddMul && op != OpKind::kAddMulBackward; }

bool is_backward_op(OpKind op) {
  return op == OpKind::kMatmulBackward || op == OpKind::kAddMulBackward || op == OpKind::kMatmulActBackward ||
         op == OpKind::kMatmulResidualBackward;
}

bool derivative_from_out(int act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

bool parse_op(const std::string& name, OpKind* op) {
  for (OpKind k : kAllOps)
    if (name == op_name(k)) {
      *op = k;
      return true;
    }
  return false;
}

namespace {
const char* const kActNames[DLFUSE_ACT_COUNT] = {"identity", "relu",      "sigmoid", "tanh",
                                                 "gelu_erf", "gelu_tanh", "silu"};
}

const char* activation_name(int act) { return act >= 0 && act < DLFUSE_ACT_COUNT ? kActNames[act] : "?"; }

bool parse_activation(const std::string& name, int* act) {
  for (int i = 0; i < DLFUSE_ACT_COUNT; ++i)
    if (name == kActNames[i]) {
      *act = i;
      return true;
    }
  return false;
}

namespace {

std::string join(const std::vector<int64_t>& s) {
  std::ostringstream o;
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "x" : "") << s[i];
  return s.empty() ? "scalar" : o.str();
}

std::vector<int64_t> cat(std::vector<int64_t> a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail);
  return a;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Activations whose formula at -Inf is NaN in IEEE arithmetic (-Inf * 0) while the limit is 0;
// docs/ops.md does not pick one, so the suite feeds them no -Inf.
bool minus_inf_ambiguous(int act) {
  return act == DLFUSE_ACT_GELU_ERF || act == DLFUSE_ACT_GELU_TANH || act == DLFUSE_ACT_SILU;
}

std::vector<double> abs_all(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

}  // namespace

std::string shape_summary(const CaseSpec& s) {
  if (is_matmul_op(s.op)) return join(cat(s.a_batch, {s.M, s.K})) + "@" + join(cat(s.b_batch, {s.K, s.N}));
  std::vector<int64_t> xy, out;
  broadcast_shapes(s.x_shape, s.y_shape, &xy);
  broadcast_shapes(xy, s.bias_shape, &out);
  return join(out);
}

PreparedCall::Tensor& PreparedCall::add(std::vector<Tensor>& list, const std::string& role,
                                        const std::vector<int64_t>& shape) {
  auto lay = spec_.layout.find(role);
  auto off = spec_.offset.find(role);
  Tensor t;
  t.role = role;
  t.host = HostTensor(dtype_, shape, lay == spec_.layout.end() ? Layout::kCompact : lay->second,
                      off == spec_.offset.end() ? 0 : off->second);
  t.present = spec_.absent.count(role) == 0;
  list.push_back(std::move(t));
  return list.back();
}

void PreparedCall::make_inputs(std::mt19937_64& rng) {
  if (is_matmul_op(spec_.op))
    make_matmul_inputs(rng);
  else
    make_add_mul_inputs(rng);
}

// Full-precision values: a kernel that drops mantissa bits (TF32) is caught. The order of
// the draws of ABI 1.0's ops is kept, so their data do not change with the suite.
void PreparedCall::make_matmul_inputs(std::mt19937_64& rng) {
  const CaseSpec& s = spec_;
  const std::vector<int64_t> a_shape = cat(s.a_batch, {s.M, s.K}), b_shape = cat(s.b_batch, {s.K, s.N});
  std::vector<int64_t> out_shape;
  broadcast_shapes(s.a_batch, s.b_batch, &out_shape);
  out_shape = cat(out_shape, {s.M, s.N});
  const double lo = s.positive ? 0.5 : -1;
  if (!is_backward_op(s.op)) {
    add(inputs_, "a", a_shape).host.fill_random(rng, lo, 1);
    add(inputs_, "b", b_shape).host.fill_random(rng, lo, 1);
    add(inputs_, "bias", s.bias_shape).host.fill_random(rng, lo, 1);
    if (s.op == OpKind::kMatmulResidual) add(inputs_, "residual", s.residual_shape).host.fill_random(rng, lo, 1);
    add(outputs_, "out", out_shape);
    if (s.op == OpKind::kMatmulAct) add(outputs_, "pre", out_shape);
    return;
  }
  add(inputs_, "grad_out", out_shape).host.fill_random(rng, lo, 1);
  add(inputs_, "a", a_shape).host.fill_random(rng, lo, 1);
  add(inputs_, "b", b_shape).host.fill_random(rng, lo, 1);
  add(outputs_, "grad_a", a_shape);
  add(outputs_, "grad_b", b_shape);
  if (s.op == OpKind::kMatmulResidualBackward) {
    add(outputs_, "grad_bias", s.bias_shape);
    add(outputs_, "grad_residual", s.residual_shape);
    return;
  }
  HostTensor bias(dtype_, s.bias_shape, Layout::kCompact, 0);
  bias.fill_random(rng, lo, 1);
  hidden_bias_ = Dense{bias.shape(), bias.values()};
  add(outputs_, "grad_bias", s.bias_shape);
  // The saved out (and pre) are what a forward would have produced, rounded to the dtype.
  const RefOut pre = ref_matmul_pre(dense(inputs_[1]), dense(inputs_[2]), hidden_bias_);
  const int act = s.op == OpKind::kMatmulBackward ? DLFUSE_ACT_RELU : s.act;
  HostTensor& out = add(inputs_, "out", out_shape).host;
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, ref_activate(act, pre.val[size_t(i)]));
  if (s.op == OpKind::kMatmulBackward) return;
  Tensor& p = add(inputs_, "pre", out_shape);
  for (int64_t i = 0; i < p.host.numel(); ++i) p.host.set(i, pre.val[size_t(i)]);
  // Exactly one of them is passed.
  inputs_[3].present = s.from_out;
  p.present = !s.from_out;
}

// add_mul data sit on a 2^-12 grid and multipliers are dyadic in the relu-backward cases,
// so the pre-activation is exact in float32 and its sign (relu's select) is not up to
// rounding. Values in [-2, 2) keep relu active about half the time.
void PreparedCall::make_add_mul_inputs(std::mt19937_64& rng) {
  const CaseSpec& s = spec_;
  std::vector<int64_t> xy, out_shape;
  broadcast_shapes(s.x_shape, s.y_shape, &xy);
  broadcast_shapes(xy, s.bias_shape, &out_shape);
  const double lo = s.positive ? 0.5 : -2, hi = s.positive ? 1 : 2;
  if (s.op == OpKind::kAddMulBackward) add(inputs_, "grad_out", out_shape).host.fill_random(rng, lo, hi, 12);
  add(inputs_, "x", s.x_shape).host.fill_random(rng, lo, hi, 12);
  add(inputs_, "y", s.y_shape).host.fill_random(rng, lo, hi, 12);
  add(inputs_, "bias", s.bias_shape).host.fill_random(rng, lo, hi, 12);
  if (s.op == OpKind::kAddMul) {
    add(outputs_, "out", out_shape);
    return;
  }
  add(outputs_, "grad_x", s.x_shape);
  add(outputs_, "grad_y", s.y_shape);
  add(outputs_, "grad_bias", s.bias_shape);
  if (!s.from_out && !s.v11_inputs) return;
  // ABI 1.1's fifth input: out (values after the specials, derive_add_mul_out). The out
  // form passes it instead of x, y and bias; v11_inputs passes it NULL.
  add(inputs_, "out", out_shape).present = s.from_out;
  for (size_t i = 1; i <= 3; ++i) inputs_[i].present = !s.from_out;
}

HostTensor& PreparedCall::input(const std::string& role) {
  for (Tensor& t : inputs_)
    if (t.role == role) return t.host;
  return inputs_[0].host;
}

void PreparedCall::nan_inf_inputs() {
  const double nan = std::nan(""), inf = INFINITY;
  if (is_matmul_op(spec_.op)) {
    // matmul_add_activation's GELU and SiLU: no -Inf (docs/ops.md), so no Inf at all.
    const bool infs = spec_.op != OpKind::kMatmulAct || !minus_inf_ambiguous(spec_.act);
    HostTensor &a = input("a"), &b = input("b");
    if (a.numel() > 0) a.set(0, nan);
    if (a.numel() > 1 && infs) a.set(a.numel() - 1, inf);
    if (b.numel() > 1 && infs) b.set(b.numel() - 1, -inf);
  } else {
    HostTensor &x = input("x"), &y = input("y");
    if (x.numel() > 0) x.set(0, nan);
    if (x.numel() > 1) x.set(1, inf);
    if (y.numel() > 2 && !minus_inf_ambiguous(spec_.act)) y.set(y.numel() - 1, -inf);
  }
}

// The out form's saved out: act(pre) of the (special-edited) x, y and bias, rounded.
void PreparedCall::derive_add_mul_out() {
  if (inputs_.size() < 5) return;
  const Dense pre = ref_pre_activation(dense(inputs_[1]), dense(inputs_[2]), dense(inputs_[3]), spec_.multiplier);
  HostTensor& out = inputs_[4].host;
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, ref_activate(spec_.act, pre.v[size_t(i)]));
}

// NaN/Inf gradients where relu blocks (they must give exactly 0), NaN where it passes.
void PreparedCall::relu_select_gradients() {
  const double nan = std::nan(""), inf = INFINITY;
  HostTensor& g = input("grad_out");
  std::vector<double> gate;  // where relu passes (> 0 or NaN) the gradient must pass
  if (spec_.op == OpKind::kMatmulBackward) {
    HostTensor& out = input("out");
    for (int64_t i = 3; i < out.numel(); i += 7) out.set(i, nan);
    gate = out.values();
  } else if (spec_.op == OpKind::kMatmulActBackward) {
    // The saved tensor is an input: exactly 0 at every fifth element (relu'(0) = 0), NaN at others.
    HostTensor& saved = input(spec_.from_out ? "out" : "pre");
    for (int64_t i = 0; i < saved.numel(); i += 5) saved.set(i, 0.0);
    for (int64_t i = 3; i < saved.numel(); i += 7) saved.set(i, nan);
    gate = saved.values();
  } else {
    gate = spec_.from_out
               ? input("out").values()
               : ref_pre_activation(dense(inputs_[1]), dense(inputs_[2]), dense(inputs_[3]), spec_.multiplier).v;
  }
  // Where pre is within a float32 formation's rounding of 0 (as in apply_specials) its sign
  // is not defined by the inputs, unless the multiplier's term is exactly 0 (the points made
  // exactly 0 above): a finite 0 there, whichever way the kernel's select goes. (x + bias
  // = -0.3 * y holds exactly in float64 for bfloat16 values, and by 2^-26 in float32.)
  std::vector<bool> unsure(size_t(g.numel()), false);
  if (spec_.op == OpKind::kAddMulBackward && !spec_.from_out) {
    const Dense x = dense(inputs_[1]), y = dense(inputs_[2]), b = dense(inputs_[3]);
    const Dense mag = ref_pre_activation(Dense{x.shape, abs_all(x.v)}, Dense{y.shape, abs_all(y.v)},
                                         Dense{b.shape, abs_all(b.v)}, std::fabs(spec_.multiplier));
    const Dense my = ref_pre_activation(Dense{x.shape, std::vector<double>(x.v.size(), 0.0)}, y,
                                        Dense{b.shape, std::vector<double>(b.v.size(), 0.0)}, spec_.multiplier);
    for (int64_t i = 0; i < g.numel(); ++i)
      unsure[size_t(i)] = my.v[size_t(i)] != 0 && std::fabs(gate[size_t(i)]) <= 1e-6 * mag.v[size_t(i)];
  }
  for (int64_t i = 0; i < g.numel(); ++i)
    if (unsure[size_t(i)])
      g.set(i, 0.0);
    else if (gate[size_t(i)] <= 0)
      g.set(i, i % 3 == 0 ? nan : (i % 3 == 1 ? inf : -inf));
}

void PreparedCall::apply_specials() {
  const double nan = std::nan("");
  if (spec_.special == Special::kNanInf) nan_inf_inputs();
  const bool add_mul_bwd = spec_.op == OpKind::kAddMulBackward;
  if (add_mul_bwd && spec_.act == DLFUSE_ACT_RELU && spec_.special != Special::kReluSelect && !spec_.from_out) {
    // A kernel may form pre in float32, so where |pre| is within its rounding of 0 the sign,
    // and with it relu's select, is not defined by the inputs. A zero gradient there makes
    // the select irrelevant (this only matters for multipliers that are not dyadic).
    const Dense x = dense(inputs_[1]), y = dense(inputs_[2]), b = dense(inputs_[3]);
    const Dense pre = ref_pre_activation(x, y, b, spec_.multiplier);
    const Dense mag = ref_pre_activation(Dense{x.shape, abs_all(x.v)}, Dense{y.shape, abs_all(y.v)},
                                         Dense{b.shape, abs_all(b.v)}, std::fabs(spec_.multiplier));
    HostTensor& g = inputs_[0].host;
    for (int64_t i = 0; i < g.numel(); ++i)
      if (std::fabs(pre.v[size_t(i)]) <= 1e-6 * mag.v[size_t(i)] && !std::isnan(pre.v[size_t(i)])) g.set(i, 0.0);
  }
  if (add_mul_bwd && spec_.special == Special::kReluSelect) {
    // pre is exactly 0 where y = 0 and x = -bias (relu'(0) = 0), NaN where x is NaN.
    HostTensor &x = input("x"), &y = input("y"), &bias = input("bias");
    for (int64_t i = 0; i < x.numel() && bias.numel() > 0; i += 5) {
      y.set(i, 0.0);
      x.set(i, -bias.get(i % bias.numel()));
    }
    for (int64_t i = 3; i < x.numel(); i += 7) x.set(i, nan);
  }
  if (spec_.special == Special::kLeftTail) {
    // Where Φ(p) = ½(1 + erf(p/√2)) keeps few digits: a kernel and a reference that differ
    // by one ulp in erf's argument differ by one ulp of erf, somewhere on so many points.
    HostTensor &x = input("x"), &y = input("y"), &bias = input("bias");
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, -3.0 - std::ldexp(double(i), -14));
    for (int64_t i = 0; i < y.numel(); ++i) y.set(i, 0.0);
    for (int64_t i = 0; i < bias.numel(); ++i) bias.set(i, 0.0);
  }
  if (add_mul_bwd) derive_add_mul_out();
  if (spec_.special == Special::kReluSelect) relu_select_gradients();
}

bool PreparedCall::place(Tensor& t, std::string* err) {
  t.shape = t.host.shape();
  t.strides = t.host.strides();
  if (!t.buf.allocate(reg_, dev_, t.host.nbytes(), err) || !t.buf.upload(t.host.data(), t.host.nbytes(), err))
    return false;
  t.dl = DLTensor{};
  t.dl.data = t.buf.ptr();
  t.dl.device = dev_;
  t.dl.ndim = int32_t(t.shape.size());
  t.dl.dtype = dtype_;
  t.dl.shape = t.shape.data();
  t.dl.strides = t.host.null_strides() ? nullptr : t.strides.data();
  t.dl.byte_offset = uint64_t(t.host.byte_offset());
  return true;
}

bool PreparedCall::prepare(const CaseSpec& spec, uint64_t seed, std::string* err) {
  spec_ = spec;
  inputs_.clear();
  outputs_.clear();
  ref_.clear();
  inputs_.reserve(5);  // Tensors hold DLTensors pointing into themselves: no reallocation
  outputs_.reserve(4);
  std::mt19937_64 rng(seed ^ fnv1a(spec.name + "/" + op_name(spec.op) + "/" + dtype_name(dtype_)));
  make_inputs(rng);
  apply_specials();
  for (Tensor& t : outputs_) t.host.fill_buffer(kPoison);
  // out is x (add_mul) or residual: same buffer and view
  if (spec_.in_place) outputs_[0].host = inputs_[size_t(in_place_input())].host;
  for (Tensor& t : inputs_)
    if (t.present && !place(t, err)) return false;
  for (Tensor& t : outputs_)
    if (t.present && !(spec_.in_place && t.role == "out") && !place(t, err)) return false;
  return true;
}

bool PreparedCall::reset(std::string* err) {
  for (Tensor& t : inputs_)
    if (t.present && !t.buf.upload(t.host.data(), t.host.nbytes(), err)) return false;
  for (Tensor& t : outputs_)
    if (t.present && !(spec_.in_place && t.role == "out") && !t.buf.upload(t.host.data(), t.host.nbytes(), err))
      return false;
  return true;
}

size_t PreparedCall::total_bytes() const {
  size_t n = 0;
  for (const Tensor& t : inputs_) n += t.present ? t.host.nbytes() : 0;
  for (const Tensor& t : outputs_) n += t.present ? t.host.nbytes() : 0;
  return n;
}

DLTensor* PreparedCall::out(size_t i) {
  if (!outputs_[i].present) return nullptr;
  if (is_in_place_out(i)) return &inputs_[size_t(in_place_input())].dl;
  return &outputs_[i].dl;
}

dlfuse_status_t PreparedCall::invoke(void* stream) {
  const int32_t tf32 = spec_.allow_tf32 ? 1 : 0;
  const auto act = dlfuse_activation_t(spec_.act);
  const bool takes_act =
      !is_matmul_op(spec_.op) || spec_.op == OpKind::kMatmulAct || spec_.op == OpKind::kMatmulActBackward;
  if (spec_.generic_call) {
    if (!op_handle_) {
      const dlfuse_status_t st = dlfuse_op_get(reg_, op_name(spec_.op), &op_handle_);
      if (st != DLFUSE_STATUS_OK) return st;
    }
    const DLTensor* ins[5];
    DLTensor* outs[4];
    for (size_t i = 0; i < inputs_.size(); ++i) ins[i] = in(i);
    for (size_t i = 0; i < outputs_.size(); ++i) outs[i] = out(i);
    std::vector<dlfuse_attr_t> attrs;
    dlfuse_attr_t a{};
    if (takes_act) {
      a.key = DLFUSE_ATTR_ACTIVATION;
      a.type = DLFUSE_ATTR_INT64;
      a.value.i64 = spec_.act;
      attrs.push_back(a);
    }
    if (is_matmul_op(spec_.op)) {
      if (tf32) {
        a.key = DLFUSE_ATTR_ALLOW_TF32;
        a.type = DLFUSE_ATTR_INT64;
        a.value.i64 = 1;
        attrs.push_back(a);
      }
    } else if (spec_.multiplier != 1.0) {
      // A multiplier of 1 is left out on purpose: the registry must fill in the default.
      a.key = DLFUSE_ATTR_MULTIPLIER;
      a.type = DLFUSE_ATTR_FLOAT64;
      a.value.f64 = spec_.multiplier;
      attrs.push_back(a);
    }
    return dlfuse_op_call(op_handle_, ins, int32_t(inputs_.size()), outs, int32_t(outputs_.size()),
                          attrs.empty() ? nullptr : attrs.data(), int32_t(attrs.size()), stream);
  }
  switch (spec_.op) {
    case OpKind::kMatmul: return dlfuse_matmul_add_relu(reg_, in(0), in(1), in(2), out(0), tf32, stream);
    case OpKind::kMatmulBackward:
      return dlfuse_matmul_add_relu_backward(reg_, in(0), in(1), in(2), in(3), out(0), out(1), out(2), tf32, stream);
    case OpKind::kAddMul:
      return dlfuse_add_mul_activation(reg_, in(0), in(1), in(2), spec_.multiplier, act, out(0), stream);
    case OpKind::kAddMulBackward:
      if (spec_.from_out)
        return dlfuse_add_mul_activation_backward_from_out(reg_, in(0), in(4), spec_.multiplier, act, out(0), out(1),
                                                           out(2), stream);
      return dlfuse_add_mul_activation_backward(reg_, in(0), in(1), in(2), in(3), spec_.multiplier, act, out(0), out(1),
                                                out(2), stream);
    case OpKind::kMatmulAct:
      return dlfuse_matmul_add_activation(reg_, in(0), in(1), in(2), act, out(0), out(1), tf32, stream);
    case OpKind::kMatmulActBackward:
      return dlfuse_matmul_add_activation_backward(reg_, in(0), in(1), in(2), in(3), in(4), act, out(0), out(1), out(2),
                                                   tf32, stream);
    case OpKind::kMatmulResidual:
      return dlfuse_matmul_add_residual(reg_, in(0), in(1), in(2), in(3), out(0), tf32, stream);
    case OpKind::kMatmulResidualBackward:
      return dlfuse_matmul_add_residual_backward(reg_, in(0), in(1), in(2), out(0), out(1), out(2), out(3), tf32,
                                                 stream);
  }
  return DLFUSE_STATUS_INTERNAL;
}

bool PreparedCall::download(Readback* rb, std::string* err, bool sync) const {
  if (sync) {
    const dlfuse_status_t st = dlfuse_device_synchronize(reg_, dev_, nullptr);
    if (st != DLFUSE_STATUS_OK) {
      *err = "device_synchronize: " + describe_failure(st);
      return false;
    }
  }
  *rb = Readback{};
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Tensor& t = outputs_[i];
    rb->out_roles.push_back(t.role);
    rb->outs.push_back(t.present ? t.host : HostTensor());
    if (!t.present) continue;
    const DeviceBuffer& buf = is_in_place_out(i) ? inputs_[size_t(in_place_input())].buf : t.buf;
    if (!buf.download(rb->outs.back().data(), rb->outs.back().nbytes(), err, false)) return false;
  }
  for (const Tensor& t : inputs_) {
    rb->in_roles.push_back(t.role);
    rb->ins.push_back(t.present ? t.host : HostTensor());  // an absent (NULL) input: empty
    if (t.present && !t.buf.download(rb->ins.back().data(), rb->ins.back().nbytes(), err, false)) return false;
  }
  return true;
}

void PreparedCall::check(const Readback& rb, CheckStats* stats) {
  // Reference from the host copies of what was uploaded (x before an in-place call).
  if (ref_.empty()) {
    switch (spec_.op) {
      case OpKind::kMatmul:
        ref_.push_back(ref_matmul_forward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2])));
        break;
      case OpKind::kMatmulBackward: {
        Grads g = ref_matmul_backward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]), dense(inputs_[3]),
                                      hidden_bias_.shape);
        ref_ = {g.first, g.second, g.bias};
        break;
      }
      case OpKind::kAddMul:
        ref_.push_back(
            ref_add_mul_forward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]), spec_.act, spec_.multiplier));
        break;
      case OpKind::kAddMulBackward: {
        Grads g = spec_.from_out
                      ? ref_add_mul_backward_from_out(dense(inputs_[0]), dense(inputs_[4]), spec_.x_shape,
                                                      spec_.y_shape, spec_.bias_shape, spec_.act, spec_.multiplier)
                      : ref_add_mul_backward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]), dense(inputs_[3]),
                                             spec_.act, spec_.multiplier);
        ref_ = {g.first, g.second, g.bias};
        break;
      }
      case OpKind::kMatmulAct:
        ref_ = ref_matmul_activation(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]), spec_.act);
        break;
      case OpKind::kMatmulActBackward: {
        Grads g = ref_matmul_activation_backward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]),
                                                 dense(inputs_[spec_.from_out ? 3 : 4]), spec_.from_out, spec_.act,
                                                 hidden_bias_.shape);
        ref_ = {g.first, g.second, g.bias};
        break;
      }
      case OpKind::kMatmulResidual:
        ref_.push_back(ref_matmul_residual(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]), dense(inputs_[3])));
        break;
      case OpKind::kMatmulResidualBackward: {
        Grads g = ref_matmul_residual_backward(dense(inputs_[0]), dense(inputs_[1]), dense(inputs_[2]),
                                               spec_.bias_shape, spec_.residual_shape);
        ref_ = {g.first, g.second, g.bias, g.residual};
        break;
      }
    }
  }
  const Tolerance tol = tolerance_for(dtype_, spec_.allow_tf32 && is_matmul_op(spec_.op));
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Tensor& t = outputs_[i];
    if (!t.present) continue;
    check_values(t.role, rb.outs[i], ref_[i], tol, stats);
    check_outside_view(t.role, rb.outs[i], t.host, stats);
  }
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].present && !(spec_.in_place && int(i) == in_place_input()))
      check_unchanged(inputs_[i].role, rb.ins[i], inputs_[i].host, stats);
}

bool PreparedCall::verify(CheckStats* stats, std::string* err, Readback* rb) {
  Readback local;
  Readback& r = rb ? *rb : local;
  if (!download(&r, err)) return false;
  check(r, stats);
  return true;
}

namespace {

std::string differ(const std::string& role, const HostTensor& a, const HostTensor& b) {
  // An absent output is an empty tensor whose data() is NULL: memcmp must not see it.
  if (a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0)) return "";
  std::ostringstream s;
  s.precision(9);
  const size_t es = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(a.element(i), b.element(i), es) != 0) {
      s << role << format_index(a.shape(), i) << ": " << a.get(i) << " vs " << b.get(i);
      return s.str();
    }
  return role + ": bytes outside the view differ";
}

}  // namespace

std::string first_difference(const PreparedCall::Readback& a, const PreparedCall::Readback& b) {
  for (size_t i = 0; i < a.outs.size() && i < b.outs.size(); ++i) {
    const std::string d = differ(a.out_roles[i], a.outs[i], b.outs[i]);
    if (!d.empty()) return d;
  }
  for (size_t i = 0; i < a.ins.size() && i < b.ins.size(); ++i) {
    const std::string d = differ("input " + a.in_roles[i], a.ins[i], b.ins[i]);
    if (!d.empty()) return d;
  }
  return "";
}

}  // namespace dlfuse_conformance
