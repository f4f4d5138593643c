// dlfuse's ops as PyTorch operators written in C++ (dlfuse/_torch_ops.so): the schemas of
// `torch.ops.dlfuse.*`, their CPU and CUDA kernels and their autograd, so that an eager call
// and its backward run in torch's dispatcher and autograd engine with no Python on the way
// (docs/python.md, "The C++ operators"). The fake (meta) kernels are dlfuse/torch.py's.
//
// The library is built against one torch version (its C++ ABI is not stable) and loaded
// only by that version; it calls libdlfuse through the entry points of the library the
// Python package loaded (dlfuse_torch_ops_init), never through a second copy.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "torch_lib.hpp"

namespace {

using namespace dlfuse_torch;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> matmul_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() < 2 || b.dim() < 2) return {0};  // the registry refuses 1-D operands and says so
  const auto as = a.sizes(), bs = b.sizes();
  const size_t na = as.size() - 2, nb = bs.size() - 2, n = std::max(na, nb);
  std::vector<int64_t> s(n, 1);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + na >= n ? as[i + na - n] : 1, db = i + nb >= n ? bs[i + nb - n] : 1;
    ok = ok && (da == db || da == 1 || db == 1);
    s[i] = da == 1 ? db : da;
  }
  if (!ok) s.assign(as.begin(), as.end() - 2);  // the registry names the mismatch
  s.push_back(as[as.size() - 2]);
  s.push_back(bs[bs.size() - 1]);
  return s;
}

std::vector<int64_t> broadcast3(at::IntArrayRef x, at::IntArrayRef y, at::IntArrayRef z) {
  const size_t n = std::max({x.size(), y.size(), z.size()});
  std::vector<int64_t> s(n, 1);
  for (at::IntArrayRef d : {x, y, z})
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& o = s[n - d.size() + i];
      if (d[i] != 1) o = d[i];  // a mismatch is the registry's to name
    }
  return s;
}

// An output of `shape`, or an empty one where the gradient is not wanted (an op returns
// tensors, never None).
Tensor grad_out_for(const Tensor& like, c10::SymIntArrayRef shape, bool need) {
  return need ? at::empty(C10_AS_INTARRAYREF_SLOW(shape), like.options()) : at::empty({0}, like.options());
}
Tensor grad_out_for(const Tensor& like, at::IntArrayRef shape, bool need) {
  return need ? at::empty(shape, like.options()) : at::empty({0}, like.options());
}
// A matmul operand's gradient; with `layout`, in the operand's own layout where it is dense
// (a GEMM writes either orientation at the same cost): for `weight.t()` that is the weight's
// layout, which autograd then accumulates into .grad without a copy. Only the eager backward
// asks for it: under torch.compile an input's strides at run time may differ from the ones
// the fake kernel saw. `transposed` is the traced backward's way to the same end: the
// transpose of a contiguous tensor, decided when the graph is traced, never from the
// strides of the run's input.
Tensor operand_grad(const Tensor& t, bool need, bool layout, bool transposed = false) {
  if (!need) return at::empty({0}, t.options());
  if (layout) return at::empty_like(t, at::MemoryFormat::Preserve);
  if (!transposed || t.dim() < 2) return at::empty(t.sizes(), t.options());
  std::vector<int64_t> s = t.sizes().vec();
  std::swap(s[s.size() - 2], s[s.size() - 1]);
  return at::empty(s, t.options()).transpose(-2, -1);
}

// Whether t is the transpose of a contiguous tensor (`weight.t()`) and not contiguous itself.
bool is_transposed(const Tensor& t) {
  return t.dim() >= 2 && !t.is_contiguous() && t.transpose(-2, -1).is_contiguous();
}


// ---- the CPU and CUDA kernels of torch.ops.dlfuse.* -----------------------------------------

Tensor k_mar(const Tensor& a, const Tensor& b, const Tensor& bias, bool tf32) {
  Tensor out = at::empty(matmul_shape(a, b), a.options());
  Dl A(a), B(b), C(bias), O(out);
  check(lib().mar(g_lib.reg, A.get(), B.get(), C.get(), O.get(), tf32, stream_of(a)));
  return out;
}

std::tuple<Tensor, Tensor, Tensor> k_mar_bwd(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out,
                                             c10::SymIntArrayRef bias_shape, bool na, bool nb, bool nbias,
                                             bool tf32, bool layout, bool tb) {
  Tensor ga = operand_grad(a, na, layout), gb = operand_grad(b, nb, layout, tb),
         gc = grad_out_for(a, bias_shape, nbias);
  Dl G(g), A(a), B(b), O(out), GA, GB, GC;
  check(lib().mar_bwd(g_lib.reg, G.get(), A.get(), B.get(), O.get(), na ? opt(GA, ga) : nullptr,
                      nb ? opt(GB, gb) : nullptr, nbias ? opt(GC, gc) : nullptr, tf32, stream_of(a)));
  return {ga, gb, gc};
}

Tensor k_amc(const Tensor& x, const Tensor& y, const Tensor& bias, double mult, int64_t act) {
  Tensor out = at::empty(broadcast3(x.sizes(), y.sizes(), bias.sizes()), x.options());
  Dl X(x), Y(y), C(bias), O(out);
  check(lib().amc(g_lib.reg, X.get(), Y.get(), C.get(), mult, dlfuse_activation_t(act), O.get(), stream_of(x)));
  return out;
}

std::tuple<Tensor, Tensor, Tensor> k_amc_bwd(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& bias,
                                             double mult, int64_t act, bool nx, bool ny, bool nbias) {
  Tensor gx = grad_out_for(x, x.sizes(), nx), gy = grad_out_for(x, y.sizes(), ny),
         gc = grad_out_for(x, bias.sizes(), nbias);
  Dl G(g), X(x), Y(y), C(bias), GX, GY, GC;
  check(lib().amc_bwd(g_lib.reg, G.get(), X.get(), Y.get(), C.get(), mult, dlfuse_activation_t(act),
                      nx ? opt(GX, gx) : nullptr, ny ? opt(GY, gy) : nullptr, nbias ? opt(GC, gc) : nullptr,
                      stream_of(x)));
  return {gx, gy, gc};
}

std::mutex g_out_form_mu;
std::map<std::pair<int32_t, int>, bool> g_out_form;
void dlfuse_torch_ops_forget_forms_impl() {
  std::lock_guard<std::mutex> lk(g_out_form_mu);
  g_out_form.clear();
}

// The out form's formulas (docs/ops.md) in torch ops: the fallback for a backward whose
// forward saved `out` and whose kernel now refuses it (another plugin preferred since).
std::tuple<Tensor, Tensor, Tensor> amc_grads_from_out_torch(const Tensor& g, const Tensor& out, double mult,
                                                            int64_t act, std::array<at::IntArrayRef, 3> shapes,
                                                            std::array<bool, 3> needs) {
  Tensor d;
  if (act == DLFUSE_ACT_RELU)  // a select: NaN passes, a blocked NaN/Inf gradient gives 0
    d = at::where(out.gt(0).logical_or(out.isnan()), g, at::zeros({}, g.options()));
  else if (act == DLFUSE_ACT_SIGMOID) d = g.mul(out).mul(out.neg().add(1));
  else if (act == DLFUSE_ACT_TANH) d = g.mul(out.mul(out).neg().add(1));
  else d = g;
  std::array<Tensor, 3> r;
  for (int i = 0; i < 3; ++i)
    r[size_t(i)] = needs[size_t(i)] ? (i == 1 ? d.mul(mult) : d).sum_to_size(shapes[size_t(i)]).clone()
                                    : at::empty({0}, g.options());
  return {r[0], r[1], r[2]};
}

std::tuple<Tensor, Tensor, Tensor> k_amc_bwd_out(const Tensor& g, const Tensor& out, double mult, int64_t act,
                                                 c10::SymIntArrayRef xs, c10::SymIntArrayRef ys,
                                                 c10::SymIntArrayRef bs, bool nx, bool ny, bool nbias) {
  Tensor gx = grad_out_for(out, xs, nx), gy = grad_out_for(out, ys, ny), gc = grad_out_for(out, bs, nbias);
  Dl G(g), O(out), GX, GY, GC;
  const dlfuse_status_t st = need(lib().amc_bwd_out, "add_mul_activation_backward_from_out")(
      g_lib.reg, G.get(), O.get(), mult, dlfuse_activation_t(act), nx ? opt(GX, gx) : nullptr,
      ny ? opt(GY, gy) : nullptr, nbias ? opt(GC, gc) : nullptr, stream_of(out));
  if (st == DLFUSE_STATUS_UNSUPPORTED) {
    dlfuse_torch_ops_forget_forms_impl();  // the registry changed since the forward chose
    return amc_grads_from_out_torch(g, out, mult, act,
                                    {C10_AS_INTARRAYREF_SLOW(xs), C10_AS_INTARRAYREF_SLOW(ys),
                                     C10_AS_INTARRAYREF_SLOW(bs)},
                                    {nx, ny, nbias});
  }
  check(st);
  return {gx, gy, gc};
}

std::tuple<Tensor, Tensor> k_maa(const Tensor& a, const Tensor& b, const Tensor& bias, int64_t act, bool save_pre,
                                 bool tf32) {
  const std::vector<int64_t> shape = matmul_shape(a, b);
  Tensor out = at::empty(shape, a.options());
  Tensor pre = save_pre ? at::empty(shape, a.options()) : at::empty({0}, a.options());
  Dl A(a), B(b), C(bias), O(out), P;
  check(need(lib().maa, "matmul_add_activation")(g_lib.reg, A.get(), B.get(), C.get(), dlfuse_activation_t(act),
                                                 O.get(), save_pre ? opt(P, pre) : nullptr, tf32, stream_of(a)));
  return {out, pre};
}

std::tuple<Tensor, Tensor, Tensor> k_maa_bwd(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& saved,
                                             int64_t act, bool saved_is_pre, c10::SymIntArrayRef bias_shape, bool na,
                                             bool nb, bool nbias, bool tf32, bool layout, bool tb) {
  Tensor ga = operand_grad(a, na, layout), gb = operand_grad(b, nb, layout, tb),
         gc = grad_out_for(a, bias_shape, nbias);
  Dl G(g), A(a), B(b), S(saved), GA, GB, GC;
  check(need(lib().maa_bwd, "matmul_add_activation_backward")(
      g_lib.reg, G.get(), A.get(), B.get(), saved_is_pre ? nullptr : S.get(), saved_is_pre ? S.get() : nullptr,
      dlfuse_activation_t(act), na ? opt(GA, ga) : nullptr, nb ? opt(GB, gb) : nullptr,
      nbias ? opt(GC, gc) : nullptr, tf32, stream_of(a)));
  return {ga, gb, gc};
}

Tensor k_mres(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& residual, bool tf32) {
  Tensor out = at::empty(matmul_shape(a, b), a.options());
  Dl A(a), B(b), C(bias), R(residual), O(out);
  check(need(lib().mres, "matmul_add_residual")(g_lib.reg, A.get(), B.get(), C.get(), R.get(), O.get(), tf32,
                                                stream_of(a)));
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> k_mres_bwd(const Tensor& g, const Tensor& a, const Tensor& b,
                                                      c10::SymIntArrayRef bias_shape,
                                                      c10::SymIntArrayRef residual_shape, bool na, bool nb,
                                                      bool nbias, bool nres, bool tf32, bool layout, bool tb) {
  Tensor ga = operand_grad(a, na, layout), gb = operand_grad(b, nb, layout, tb),
         gc = grad_out_for(a, bias_shape, nbias), gr = grad_out_for(a, residual_shape, nres);
  Dl G(g), A(a), B(b), GA, GB, GC, GR;
  check(need(lib().mres_bwd, "matmul_add_residual_backward")(
      g_lib.reg, G.get(), A.get(), B.get(), na ? opt(GA, ga) : nullptr, nb ? opt(GB, gb) : nullptr,
      nbias ? opt(GC, gc) : nullptr, nres ? opt(GR, gr) : nullptr, tf32, stream_of(a)));
  return {ga, gb, gc, gr};
}

// ---- which add_mul_activation_backward form the serving kernel takes -----------------------

// The out form is an input ABI 1.1 appended to a 1.0 op: only a kernel that declares
// DLFUSE_KERNEL_TAKES_V1_1_INPUTS takes it. Asked once per (device type, dtype).
bool kernel_takes_out(int32_t dev, DLDataType dt) {
  const Lib& L = lib();
  dlfuse_op_t op = nullptr;
  int32_t idx = -1;
  if (!L.op_get || !L.op_resolve || !L.kernel_info || !L.plugin_info || !L.amc_bwd_out) return false;
  if (L.op_get(L.reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &op) || L.op_resolve(op, dev, dt, &idx)) return false;
  dlfuse_plugin_info_t pi{};
  pi.struct_size = sizeof pi;
  if (L.plugin_info(L.reg, idx, &pi)) return false;
  for (int32_t k = 0; k < pi.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    if (L.kernel_info(L.reg, idx, k, &ki) || std::string(ki.op) != DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD ||
        ki.device_type != dev)
      continue;
    for (int32_t d = 0; d < ki.num_dtypes; ++d)
      if (ki.dtypes[d].code == dt.code && ki.dtypes[d].bits == dt.bits)
        return (ki.flags & DLFUSE_KERNEL_TAKES_V1_1_INPUTS) != 0;
  }
  return false;
}


bool out_form_ok(const Tensor& x) {
  const int32_t dev = x.is_cuda() ? kDLCUDA : kDLCPU;
  const auto key = std::make_pair(dev, int(x.scalar_type()));
  std::lock_guard<std::mutex> lk(g_out_form_mu);
  auto it = g_out_form.find(key);
  if (it == g_out_form.end()) it = g_out_form.emplace(key, kernel_takes_out(dev, dl_dtype(x.scalar_type()))).first;
  return it->second;
}

// identity, relu, sigmoid, tanh: act' is a function of act's output
bool act_from_out(int64_t act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

// ---- autograd ------------------------------------------------------------------------------

template <class Sig> c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

Tensor none() { return Tensor(); }
template <size_t N> variable_list grads_if(const std::array<Tensor, N>& g, AutogradContext* ctx, size_t extra) {
  variable_list r;
  for (size_t i = 0; i < N; ++i) r.push_back(ctx->needs_input_grad(i) ? g[i] : none());
  for (size_t i = 0; i < extra; ++i) r.push_back(none());
  return r;
}

struct MarFn : torch::autograd::Function<MarFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, const Tensor& bias, bool tf32) {
    static auto fwd = op<Tensor(const Tensor&, const Tensor&, const Tensor&, bool)>("dlfuse::matmul_add_relu");
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor out = fwd.call(a, b, bias, tf32);
    ctx->save_for_backward({a, b, out});
    ctx->saved_data["bias_shape"] = bias.sym_sizes().vec();
    ctx->saved_data["tf32"] = tf32;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    static auto bwd = op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                            c10::SymIntArrayRef, bool, bool, bool, bool, bool,
                                                            bool)>("dlfuse::matmul_add_relu_backward");
    const auto s = ctx->get_saved_variables();
    const auto bs = ctx->saved_data["bias_shape"].toSymIntVector();
    const bool tr = traced(g[0]);
    auto [ga, gb, gc] = bwd.call(g[0], s[0], s[1], s[2], bs, ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                 ctx->needs_input_grad(2), ctx->saved_data["tf32"].toBool(), !tr,
                                 tr && is_transposed(s[1]));
    return grads_if<3>({ga, gb, gc}, ctx, 1);
  }
};

struct AmcFn : torch::autograd::Function<AmcFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y, const Tensor& bias, double mult,
                        int64_t act) {
    static auto fwd =
        op<Tensor(const Tensor&, const Tensor&, const Tensor&, double, int64_t)>("dlfuse::add_mul_activation");
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor out = fwd.call(x, y, bias, mult, act);
    ctx->saved_data["mult"] = mult;
    ctx->saved_data["act"] = act;
    const bool from_out = act_from_out(act) && out_form_ok(x);
    ctx->saved_data["from_out"] = from_out;
    if (from_out) {  // only out: autograd's version counter still catches an in-place change of it
      ctx->save_for_backward({out});
      ctx->saved_data["x_shape"] = x.sym_sizes().vec();
      ctx->saved_data["y_shape"] = y.sym_sizes().vec();
      ctx->saved_data["bias_shape"] = bias.sym_sizes().vec();
    } else {
      ctx->save_for_backward({x, y, bias});
    }
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    using G3 = std::tuple<Tensor, Tensor, Tensor>;
    static auto bwd = op<G3(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, int64_t, bool, bool,
                            bool)>("dlfuse::add_mul_activation_backward");
    static auto bwd_out = op<G3(const Tensor&, const Tensor&, double, int64_t, c10::SymIntArrayRef,
                                c10::SymIntArrayRef, c10::SymIntArrayRef, bool, bool, bool)>(
        "dlfuse::add_mul_activation_backward_from_out");
    const auto s = ctx->get_saved_variables();
    const double m = ctx->saved_data["mult"].toDouble();
    const int64_t act = ctx->saved_data["act"].toInt();
    const bool n0 = ctx->needs_input_grad(0), n1 = ctx->needs_input_grad(1), n2 = ctx->needs_input_grad(2);
    G3 r;
    if (ctx->saved_data["from_out"].toBool()) {
      auto& sd = ctx->saved_data;
      r = bwd_out.call(g[0], s[0], m, act, sd["x_shape"].toSymIntVector(), sd["y_shape"].toSymIntVector(),
                       sd["bias_shape"].toSymIntVector(), n0, n1, n2);
    } else {
      r = bwd.call(g[0], s[0], s[1], s[2], m, act, n0, n1, n2);
    }
    return grads_if<3>({std::get<0>(r), std::get<1>(r), std::get<2>(r)}, ctx, 2);
  }
};

struct MaaFn : torch::autograd::Function<MaaFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, const Tensor& bias,
                               int64_t act, bool save_pre, bool tf32) {
    static auto fwd = op<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, int64_t, bool, bool)>(
        "dlfuse::matmul_add_activation");
    at::AutoDispatchBelowADInplaceOrView guard;
    const bool is_pre = !act_from_out(act);
    auto [out, pre] = fwd.call(a, b, bias, act, save_pre, tf32);
    ctx->mark_non_differentiable({pre});
    ctx->save_for_backward({a, b, is_pre ? pre : out});
    ctx->saved_data["act"] = act;
    ctx->saved_data["is_pre"] = is_pre;
    ctx->saved_data["bias_shape"] = bias.sym_sizes().vec();
    ctx->saved_data["tf32"] = tf32;
    return {out, pre};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    static auto bwd = op<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                            int64_t, bool, c10::SymIntArrayRef, bool, bool, bool,
                                                            bool, bool, bool)>("dlfuse::matmul_add_activation_backward");
    const auto s = ctx->get_saved_variables();
    const bool tr = traced(g[0]);
    auto [ga, gb, gc] = bwd.call(g[0], s[0], s[1], s[2], ctx->saved_data["act"].toInt(),
                                 ctx->saved_data["is_pre"].toBool(), ctx->saved_data["bias_shape"].toSymIntVector(),
                                 ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2),
                                 ctx->saved_data["tf32"].toBool(), !tr, tr && is_transposed(s[1]));
    return grads_if<3>({ga, gb, gc}, ctx, 3);
  }
};

struct MresFn : torch::autograd::Function<MresFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, const Tensor& bias,
                        const Tensor& residual, bool tf32) {
    static auto fwd = op<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool)>(
        "dlfuse::matmul_add_residual");
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({a, b});  // bias and residual: their shapes are enough
    ctx->saved_data["bias_shape"] = bias.sym_sizes().vec();
    ctx->saved_data["residual_shape"] = residual.sym_sizes().vec();
    ctx->saved_data["tf32"] = tf32;
    return fwd.call(a, b, bias, residual, tf32);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    static auto bwd = op<std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                                    c10::SymIntArrayRef, c10::SymIntArrayRef, bool,
                                                                    bool, bool, bool, bool, bool, bool)>(
        "dlfuse::matmul_add_residual_backward");
    const auto s = ctx->get_saved_variables();
    const bool tr = traced(g[0]);
    auto [ga, gb, gc, gr] =
        bwd.call(g[0], s[0], s[1], ctx->saved_data["bias_shape"].toSymIntVector(),
                 ctx->saved_data["residual_shape"].toSymIntVector(), ctx->needs_input_grad(0),
                 ctx->needs_input_grad(1), ctx->needs_input_grad(2), ctx->needs_input_grad(3),
                 ctx->saved_data["tf32"].toBool(), !tr, tr && is_transposed(s[1]));
    return grads_if<4>({ga, gb, gc, gr}, ctx, 1);
  }
};

Tensor ag_mar(const Tensor& a, const Tensor& b, const Tensor& bias, bool tf32) { return MarFn::apply(a, b, bias, tf32); }
Tensor ag_amc(const Tensor& x, const Tensor& y, const Tensor& bias, double m, int64_t act) {
  return AmcFn::apply(x, y, bias, m, act);
}
std::tuple<Tensor, Tensor> ag_maa(const Tensor& a, const Tensor& b, const Tensor& bias, int64_t act, bool save_pre,
                                  bool tf32) {
  const bool grad =
      at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad() || bias.requires_grad());
  TORCH_CHECK(!grad || save_pre || act_from_out(act),
              "dlfuse::matmul_add_activation: the gradient of this activation reads pre: call the op with "
              "save_pre=True when an input requires grad (dlfuse.torch.matmul_add_activation does)");
  auto r = MaaFn::apply(a, b, bias, act, save_pre, tf32);
  return {r[0], r[1]};
}
Tensor ag_mres(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& residual, bool tf32) {
  return MresFn::apply(a, b, bias, residual, tf32);
}

}  // namespace

// The schemas are those dlfuse.torch's Python custom ops had (docs/python.md lists them).
TORCH_LIBRARY(dlfuse, m) {
  m.set_python_module("dlfuse.torch");  // where the fake kernels live
  m.def("matmul_add_relu(Tensor a, Tensor b, Tensor bias, bool allow_tf32=False) -> Tensor");
  m.def("matmul_add_relu_backward(Tensor grad_out, Tensor a, Tensor b, Tensor out, SymInt[] bias_shape, "
        "bool needs_a, bool needs_b, bool needs_bias, bool allow_tf32=False, bool operand_layout=False, "
        "bool transposed_b=False) -> (Tensor, Tensor, Tensor)");
  m.def("add_mul_activation(Tensor x, Tensor y, Tensor bias, float multiplier=1.0, int activation=1) -> Tensor");
  m.def("add_mul_activation_backward(Tensor grad_out, Tensor x, Tensor y, Tensor bias, float multiplier, "
        "int activation, bool needs_x, bool needs_y, bool needs_bias) -> (Tensor, Tensor, Tensor)");
  m.def("add_mul_activation_backward_from_out(Tensor grad_out, Tensor out, float multiplier, int activation, "
        "SymInt[] x_shape, SymInt[] y_shape, SymInt[] bias_shape, bool needs_x, bool needs_y, bool needs_bias) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("matmul_add_activation(Tensor a, Tensor b, Tensor bias, int activation, bool save_pre=False, "
        "bool allow_tf32=False) -> (Tensor, Tensor)");
  m.def("matmul_add_activation_backward(Tensor grad_out, Tensor a, Tensor b, Tensor saved, int activation, "
        "bool saved_is_pre, SymInt[] bias_shape, bool needs_a, bool needs_b, bool needs_bias, "
        "bool allow_tf32=False, bool operand_layout=False, bool transposed_b=False) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("matmul_add_residual(Tensor a, Tensor b, Tensor bias, Tensor residual, bool allow_tf32=False) -> Tensor");
  m.def("matmul_add_residual_backward(Tensor grad_out, Tensor a, Tensor b, SymInt[] bias_shape, "
        "SymInt[] residual_shape, bool needs_a, bool needs_b, bool needs_bias, bool needs_residual, "
        "bool allow_tf32=False, bool operand_layout=False, bool transposed_b=False) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
}

#define DLFUSE_KERNELS(m)                                                        \
  m.impl("matmul_add_relu", &k_mar);                                             \
  m.impl("matmul_add_relu_backward", &k_mar_bwd);                                \
  m.impl("add_mul_activation", &k_amc);                                          \
  m.impl("add_mul_activation_backward", &k_amc_bwd);                             \
  m.impl("add_mul_activation_backward_from_out", &k_amc_bwd_out);                \
  m.impl("matmul_add_activation", &k_maa);                                       \
  m.impl("matmul_add_activation_backward", &k_maa_bwd);                          \
  m.impl("matmul_add_residual", &k_mres);                                        \
  m.impl("matmul_add_residual_backward", &k_mres_bwd)

TORCH_LIBRARY_IMPL(dlfuse, CPU, m) { DLFUSE_KERNELS(m); }
TORCH_LIBRARY_IMPL(dlfuse, CUDA, m) { DLFUSE_KERNELS(m); }

TORCH_LIBRARY_IMPL(dlfuse, Autograd, m) {
  m.impl("matmul_add_relu", &ag_mar);
  m.impl("add_mul_activation", &ag_amc);
  m.impl("matmul_add_activation", &ag_maa);
  m.impl("matmul_add_residual", &ag_mres);
}

// Called once by dlfuse.torch: the libdlfuse the package loaded (dlopen'ed again by path,
// which shares its handle) and the registry to dispatch through. 0, or -1 with *why set.
extern "C" __attribute__((visibility("default"))) int dlfuse_torch_ops_init(const char* path, void* registry,
                                                                          const char** why) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h || !registry) {
    if (why) *why = h ? "no registry" : dlerror();
    return -1;
  }
  Lib L;
  bind(h, "dlfuse_last_error", L.last_error);
  bind(h, "dlfuse_matmul_add_relu", L.mar);
  bind(h, "dlfuse_matmul_add_relu_backward", L.mar_bwd);
  bind(h, "dlfuse_add_mul_activation", L.amc);
  bind(h, "dlfuse_add_mul_activation_backward", L.amc_bwd);
  bind(h, "dlfuse_add_mul_activation_backward_from_out", L.amc_bwd_out);
  bind(h, "dlfuse_matmul_add_activation", L.maa);
  bind(h, "dlfuse_matmul_add_activation_backward", L.maa_bwd);
  bind(h, "dlfuse_matmul_add_residual", L.mres);
  bind(h, "dlfuse_matmul_add_residual_backward", L.mres_bwd);
  bind(h, "dlfuse_op_get", L.op_get);
  bind(h, "dlfuse_op_resolve", L.op_resolve);
  bind(h, "dlfuse_registry_plugin_info", L.plugin_info);
  bind(h, "dlfuse_registry_kernel_info", L.kernel_info);
  bind(h, "dlfuse_op_call", L.op_call);
  bind(h, "dlfuse_op_schema", L.op_schema);
  bind(h, "dlfuse_op_infer_outputs", L.op_infer_outputs);
  if (!L.last_error || !L.mar || !L.mar_bwd || !L.amc || !L.amc_bwd) {
    if (why) *why = "not libdlfuse: a 1.0 entry point is missing";
    return -1;
  }
  L.reg = static_cast<dlfuse_registry_t>(registry);
  g_lib = L;
  dlfuse_torch_ops_forget_forms_impl();
  return 0;
}

// Forget which add_mul backward form each (device, dtype) takes (plugins preferred since).
extern "C" __attribute__((visibility("default"))) void dlfuse_torch_ops_forget_forms(void) {
  dlfuse_torch_ops_forget_forms_impl();
}

// The torch version this library was compiled against; dlfuse.torch loads it only into
// that version.
extern "C" __attribute__((visibility("default"))) const char* dlfuse_torch_ops_torch_version(void) {
  return DLFUSE_TORCH_VERSION;
}
