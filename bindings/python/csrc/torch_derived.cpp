// Operators derived from dlfuse op schemas: every op of the registry (ops.def's, a plugin's
// own) gets torch.ops.dlfuse.<op> with one boxed kernel and one autograd node type shared by
// all, so that an eager call and its backward run in torch's dispatcher and autograd engine
// with no Python on the way (docs/python.md, "The C++ operators"). dlfuse.torch writes the
// torch schema of each (_Derived.torch_schema) and its fake kernel; this file finds the op's
// inputs, attributes, `needs` and `<x>_shape` among the torch arguments by their names in
// that schema, so the two cannot disagree on the layout.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "torch_lib.hpp"

namespace {

using namespace dlfuse_torch;
using c10::IValue;
using torch::autograd::variable_list;
using torch::jit::Stack;

constexpr int kAbsent = -1;

// torch 2.13 made autograd nodes intrusively counted (c10::intrusive_ptr_target); before, they
// were std::shared_ptr-owned, deleted through deleteNode. Nothing else here depends on which.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
template <class N>
c10::intrusive_ptr<N> new_node() {
  return c10::make_intrusive<N>();
}
c10::intrusive_ptr<torch::autograd::Node> self_of(torch::autograd::Node* n) {
  return c10::intrusive_ptr<torch::autograd::Node>::unsafe_reclaim_from_nonowning(n);
}
#else
template <class N>
std::shared_ptr<N> new_node() {
  return std::shared_ptr<N>(new N(), torch::autograd::deleteNode);
}
std::shared_ptr<torch::autograd::Node> self_of(torch::autograd::Node* n) { return n->shared_from_this(); }
#endif

std::string lower(const char* s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string grad_stem(const std::string& n) { return n.rfind("grad_", 0) == 0 ? n.substr(5) : n; }

// One derived operator: its dlfuse op and schema, and where each part of a call sits among
// the torch operator's arguments.
struct Derived {
  std::string name;
  dlfuse_op_schema_t sc{};
  std::optional<c10::OperatorHandle> handle;
  size_t num_args = 0;
  std::vector<int> in_arg, attr_arg, shape_arg;  // per input, attribute, output: torch argument
  int needs_arg = kAbsent;                       // bool[] needs, where an output is optional
  int transposed_arg = kAbsent;                  // bool[] transposed, where an output is a grad_<x>
  std::vector<int> grad_input;                   // per output grad_<x>: input x of this op, or kAbsent
  // Autograd, where the registry has <op>_backward: its derived operator and, per backward
  // argument, where the value comes from (which of them a call keeps is its backward plan).
  const Derived* bwd = nullptr;
  std::vector<int> saved_from;  // backward input i >= 1: forward input k (k), output k (-2 - k)
  std::vector<int> attr_from;   // backward attribute j: the forward's of that name, or kAbsent
  std::vector<int> grad_of;     // backward output j (grad_<x>): forward input x, or kAbsent
  std::vector<int> shape_from;  // backward output j's `<x>_shape`: as saved_from, or kAbsent

  // The op's handle, looked up on first use: an op no plugin offers (yet) is defined all the
  // same, and its call raises UNSUPPORTED (as dlfuse._ext does: the op exists, nothing serves
  // it); a plugin loaded later may offer it.
  dlfuse_op_t op() const {
    dlfuse_op_t h = op_.load(std::memory_order_acquire);
    if (!h) {
      const dlfuse_status_t st = lib().op_get(lib().reg, name.c_str(), &h);
      check(st == DLFUSE_STATUS_NOT_FOUND ? DLFUSE_STATUS_UNSUPPORTED : st);
      op_.store(h, std::memory_order_release);
    }
    return h;
  }
  mutable std::atomic<dlfuse_op_t> op_{nullptr};

  int input(const std::string& n) const { return find(sc.inputs, sc.num_inputs, n); }
  int output(const std::string& n) const { return find(sc.outputs, sc.num_outputs, n); }
  static int find(const dlfuse_arg_schema_t* a, int32_t count, const std::string& n) {
    for (int32_t i = 0; i < count; ++i)
      if (n == a[i].name) return i;
    return kAbsent;
  }
};

std::mutex g_mu;
std::map<std::string, const Derived*> g_derived;  // kept for the process's life, as torch's ops

// Set by the eager backward around its call of <op>_backward: an output grad_<x> whose input
// x is dense is then allocated in x's layout (for `weight.t()`, the weight's), so autograd
// accumulates it into .grad without a copy kernel. Not under torch.compile, whose fake kernel
// allocates compact outputs (as the hand-written operators' operand_layout).
thread_local bool t_operand_layout = false;

// ---- the kernel (CPU and CUDA) ---------------------------------------------------------------

struct CallArgs {
  std::array<Dl, DLFUSE_MAX_ARGS> in_dl, out_dl;
  std::array<const DLTensor*, DLFUSE_MAX_ARGS> in{};
  std::array<DLTensor*, DLFUSE_MAX_ARGS> out{};
  std::array<dlfuse_attr_t, DLFUSE_MAX_ATTRS> attrs{};
  Tensor like;  // the first input given: the outputs' device and dtype
};

// Every attribute of a call, in schema order, each by its type in the op's schema (its key is
// the op's own and says nothing of its type); an INT64 one refuses a float, nothing is
// truncated.
void read_attrs(const Derived& d, c10::ArrayRef<IValue> args, dlfuse_attr_t* attrs) {
  for (int32_t j = 0; j < d.sc.num_attrs; ++j) {
    dlfuse_attr_t& a = attrs[j];
    a = d.sc.attrs[j].default_value;
    const IValue& v = args[size_t(d.attr_arg[size_t(j)])];
    if (a.type == DLFUSE_ATTR_FLOAT64) {
      TORCH_CHECK_TYPE(v.isDouble() || v.isInt() || v.isBool(), "dlfuse::", d.name, ": ", lower(d.sc.attrs[j].name),
                       " must be a real number (FLOAT64 attribute), got ", v.tagKind());
      a.value.f64 = v.isDouble() ? v.toDouble() : v.isInt() ? double(v.toInt()) : double(v.toBool());
    } else {
      TORCH_CHECK_TYPE(v.isInt() || v.isBool(), "dlfuse::", d.name, ": ", lower(d.sc.attrs[j].name),
                       " must be an integer (INT64 attribute), got ", v.tagKind());
      a.value.i64 = v.isInt() ? v.toInt() : int64_t(v.toBool());
    }
  }
}

void read_inputs(const Derived& d, c10::ArrayRef<IValue> args, CallArgs& c) {
  for (int32_t i = 0; i < d.sc.num_inputs; ++i) {
    const IValue& v = args[size_t(d.in_arg[size_t(i)])];
    if (!v.isTensor()) continue;
    const Tensor& t = v.toTensor();
    c.in_dl[size_t(i)] = Dl(t);
    c.in[size_t(i)] = c.in_dl[size_t(i)].get();
    if (!c.like.defined()) c.like = t;
  }
  TORCH_CHECK_VALUE(c.like.defined(), "dlfuse::", d.name, ": no input tensor given");
  read_attrs(d, args, c.attrs.data());
}

// A bool[] argument with one entry per output, or none (`fill` for every output).
std::vector<bool> per_output(const Derived& d, c10::ArrayRef<IValue> args, int arg, const char* what, bool fill) {
  std::vector<bool> v(size_t(d.sc.num_outputs), fill);
  if (arg == kAbsent) return v;
  const c10::List<bool> given = args[size_t(arg)].toBoolList();
  if (given.empty()) return v;
  TORCH_CHECK_VALUE(given.size() == v.size(), "dlfuse::", d.name, ": ", what, " has ", given.size(),
                    " entries; expected ", v.size(), " (one per output) or none");
  for (size_t k = 0; k < v.size(); ++k) v[k] = given.get(k);
  return v;
}

// Which outputs a call computes: every required one, and the optional ones `needs` names.
std::vector<bool> read_needs(const Derived& d, c10::ArrayRef<IValue> args) {
  std::vector<bool> needs = per_output(d, args, d.needs_arg, "needs", true);
  for (int32_t k = 0; k < d.sc.num_outputs; ++k)
    if (!(d.sc.outputs[k].flags & DLFUSE_ARG_OPTIONAL)) needs[size_t(k)] = true;
  return needs;
}

// The transpose of a contiguous tensor of `shape` (ndim >= 2): a matmul operand's gradient in
// the layout of `weight.t()`, decided when a graph is traced.
Tensor empty_transposed(at::IntArrayRef shape, const at::TensorOptions& o) {
  std::vector<int64_t> s = shape.vec();
  std::swap(s[s.size() - 2], s[s.size() - 1]);
  return at::empty(s, o).transpose(-2, -1);
}

// The output shapes of an op's last call on this thread, by its input shapes and attributes:
// a training loop repeats its shapes, and dlfuse_op_infer_outputs costs ~3k instructions a
// call. Output shapes are a function of the input shapes and attributes alone (the call
// itself is still validated in full by the registry).
struct ShapeMemo {
  std::vector<int64_t> key;  // per input: ndim (-1: absent) and dims; then each attribute's bits
  std::array<int32_t, DLFUSE_MAX_ARGS> ndims{};
  std::array<int64_t, DLFUSE_MAX_ARGS * DLFUSE_MAX_NDIM> shapes{};
};

const ShapeMemo& output_shapes(const Derived& d, const CallArgs& c) {
  thread_local std::map<const Derived*, ShapeMemo> memos;
  thread_local std::vector<int64_t> key;
  key.clear();
  for (int32_t i = 0; i < d.sc.num_inputs; ++i) {
    const DLTensor* t = c.in[size_t(i)];
    key.push_back(t ? t->ndim : -1);
    for (int32_t k = 0; t && k < t->ndim; ++k) key.push_back(t->shape[k]);
  }
  for (int32_t j = 0; j < d.sc.num_attrs; ++j) {
    int64_t bits;  // an INT64 value, or a FLOAT64's bits
    std::memcpy(&bits, &c.attrs[size_t(j)].value, sizeof bits);
    key.push_back(bits);
  }
  ShapeMemo& m = memos[&d];
  if (m.key == key) return m;
  std::array<DLDataType, DLFUSE_MAX_ARGS> dtypes{};
  m.key.clear();  // stays empty if inference refuses the call
  check(lib().op_infer_outputs(d.op(), c.in.data(), d.sc.num_inputs, c.attrs.data(), d.sc.num_attrs, d.sc.num_outputs,
                               m.ndims.data(), m.shapes.data(), dtypes.data()));
  m.key = key;
  return m;
}

std::vector<Tensor> make_outputs(const Derived& d, c10::ArrayRef<IValue> args, CallArgs& c) {
  const std::vector<bool> needs = read_needs(d, args);
  const std::vector<bool> transposed = per_output(d, args, d.transposed_arg, "transposed", false);
  const int32_t n_out = d.sc.num_outputs;
  const ShapeMemo& memo = output_shapes(d, c);
  const auto& ndims = memo.ndims;
  const auto& shapes = memo.shapes;
  std::vector<Tensor> outs;
  for (int32_t k = 0; k < n_out; ++k) {
    const size_t ks = size_t(k);
    if (!needs[ks]) {
      outs.push_back(at::empty({0}, c.like.options()));
      continue;
    }
    const int a = d.shape_arg[ks], x = d.grad_input[ks];
    const at::IntArrayRef inferred(&shapes[ks * DLFUSE_MAX_NDIM], size_t(ndims[ks]));
    const IValue* xv = x != kAbsent ? &args[size_t(d.in_arg[size_t(x)])] : nullptr;
    if (a != kAbsent && !args[size_t(a)].isNone())
      outs.push_back(at::empty(args[size_t(a)].toIntVector(), c.like.options()));
    else if (transposed[ks] && inferred.size() >= 2)
      outs.push_back(empty_transposed(inferred, c.like.options()));
    else if (t_operand_layout && xv && xv->isTensor() && xv->toTensor().sizes() == inferred &&
             xv->toTensor().is_non_overlapping_and_dense())
      outs.push_back(at::empty_like(xv->toTensor(), at::MemoryFormat::Preserve));
    else
      outs.push_back(at::empty(inferred, c.like.options()));
    c.out_dl[ks] = Dl(outs.back());
    c.out[ks] = c.out_dl[ks].get();
  }
  return outs;
}

void run(const Derived& d, Stack* stack) {
  const auto args = torch::jit::last(*stack, d.num_args);
  CallArgs c;
  read_inputs(d, args, c);
  std::vector<Tensor> outs = make_outputs(d, args, c);
  check(lib().op_call(d.op(), c.in.data(), d.sc.num_inputs, c.out.data(), d.sc.num_outputs, c.attrs.data(),
                      d.sc.num_attrs, stream_of(c.like)));
  torch::jit::drop(*stack, d.num_args);
  for (Tensor& t : outs) stack->emplace_back(std::move(t));
}

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(const Derived* d) : d(d) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) { run(*d, stack); }
  const Derived* d;
};

// ---- autograd: one node per call keeps what <op>_backward reads (the op's backward plan);
// only the first output is differentiable (the backward's grad_out is its gradient). A Node of
// its own rather than torch::autograd::Function: no context map of saved data, no argument
// wrapping, a few thousand instructions less per call on small tensors ------------------------

IValue tensor_or_none(const Tensor& t) { return t.defined() ? IValue(t) : IValue(); }

// A forward tensor by saved_from's code: input k (k >= 0) or output k (-2 - k).
Tensor forward_tensor(const Derived& d, c10::ArrayRef<IValue> args, c10::ArrayRef<IValue> outs, int code) {
  if (code == kAbsent) return Tensor();
  const IValue& v = code >= 0 ? args[size_t(d.in_arg[size_t(code)])] : outs[size_t(-2 - code)];
  return v.isTensor() ? v.toTensor() : Tensor();
}

// The backward's arguments but its tensors and `needs`: attributes and `<x>_shape`.
std::vector<IValue> backward_args(const Derived& d, c10::ArrayRef<IValue> args, c10::ArrayRef<IValue> outs) {
  const Derived& b = *d.bwd;
  std::vector<IValue> s(b.num_args);
  for (int32_t j = 0; j < b.sc.num_attrs; ++j) {
    const int from = d.attr_from[size_t(j)];
    const dlfuse_attr_t& def = b.sc.attrs[j].default_value;
    IValue v = from != kAbsent ? args[size_t(d.attr_arg[size_t(from)])]
                               : (def.type == DLFUSE_ATTR_FLOAT64 ? IValue(def.value.f64) : IValue(def.value.i64));
    // by the backward's own type for the name (its torch argument's): an int forward value of a
    // FLOAT64 backward attribute is widened; a float for an INT64 one is refused by read_attrs
    if (def.type == DLFUSE_ATTR_FLOAT64 && v.isInt()) v = IValue(double(v.toInt()));
    s[size_t(b.attr_arg[size_t(j)])] = std::move(v);
  }
  for (int32_t k = 0; k < b.sc.num_outputs; ++k) {
    const int a = b.shape_arg[size_t(k)];
    if (a == kAbsent) continue;
    const Tensor t = forward_tensor(d, args, outs, d.shape_from[size_t(k)]);
    s[size_t(a)] = t.defined() ? IValue(t.sym_sizes()) : IValue();
  }
  return s;
}

// Per backward output grad_<x>: whether the forward's input x is the transpose of a contiguous
// tensor (`weight.t()`). A traced backward allocates that gradient so (`transposed`), which
// autograd accumulates into the weight's .grad without a copy; decided when the graph is
// traced, never from the strides of a later run's input.
c10::List<bool> transposed_inputs(const Derived& d, c10::ArrayRef<IValue> args) {
  c10::List<bool> r;
  for (int x : d.grad_of) {
    const IValue* v = x != kAbsent ? &args[size_t(d.in_arg[size_t(x)])] : nullptr;
    const bool t = v && v->isTensor() && v->toTensor().dim() >= 2 && !v->toTensor().is_contiguous() &&
                   v->toTensor().transpose(-2, -1).is_contiguous();
    r.push_back(t);
  }
  return r;
}

// What a call keeps for its backward, by libdlfuse's backward plan for its attributes, device
// and dtype: bit i of keep = backward input i, bit k of write = forward output k.
// NOT_FOUND (no plugin offers the backward) is not an error here: the forward runs as asked
// and the node raises it if a backward runs (`unavailable`), as torch does for an op without
// a derivative.
struct Plan {
  uint32_t keep = 0, write = 0;
  std::string unavailable;  // the registry's message where no plugin offers the backward
};
Plan backward_plan(const Derived& d, c10::ArrayRef<IValue> args, const Tensor& like) {
  std::array<dlfuse_attr_t, DLFUSE_MAX_ATTRS> attrs{};
  read_attrs(d, args, attrs.data());
  dlfuse_op_t bwd = nullptr;
  Plan p;
  const dlfuse_status_t st =
      lib().op_backward_plan(d.op(), attrs.data(), d.sc.num_attrs, like.is_cuda() ? kDLCUDA : kDLCPU,
                             dl_dtype(like.scalar_type()), &bwd, &p.keep, &p.write);
  if (st == DLFUSE_STATUS_NOT_FOUND)
    p.unavailable = status_message(st);
  else
    check(st);
  return p;
}

// The node of one forward call: runs <op>_backward with what the forward kept.
struct DerivedNode final : torch::autograd::Node {
  const Derived* d = nullptr;
  std::vector<torch::autograd::SavedVariable> saved;  // backward input i >= 1 at i - 1 (empty: not kept)
  std::vector<IValue> pre;                            // the backward's arguments by backward_args
  std::vector<int64_t> edge_of;                       // forward input -> its edge, or kAbsent
  std::optional<c10::List<bool>> transposed;          // traced graphs: transposed_inputs
  std::string unavailable;                            // Plan::unavailable: raised by apply

  std::string name() const override { return "dlfuse::" + d->name + "Backward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : saved) s.reset_data();
  }
  variable_list apply(variable_list&& grads) override;
};

// Which backward outputs to compute: grad_<x> where autograd wants input x's gradient.
c10::List<bool> wanted(const DerivedNode& n) {
  c10::List<bool> need;
  for (int x : n.d->grad_of)
    need.push_back(x != kAbsent && n.edge_of[size_t(x)] != kAbsent &&
                   n.should_compute_output(size_t(n.edge_of[size_t(x)])));
  return need;
}

variable_list DerivedNode::apply(variable_list&& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  variable_list r(num_outputs());                      // one per forward input tensor
  if (grads.empty() || !grads[0].defined()) return r;  // the first output took no part
  TORCH_CHECK(unavailable.empty(), unavailable);
  const Derived& b = *d->bwd;
  Stack s(pre.begin(), pre.end());
  s[size_t(b.in_arg[0])] = grads[0];
  for (size_t i = 1; i < size_t(b.sc.num_inputs); ++i)
    s[size_t(b.in_arg[i])] = tensor_or_none(saved[i - 1].unpack(self_of(this)));
  const c10::List<bool> need = wanted(*this);
  if (b.needs_arg != kAbsent) s[size_t(b.needs_arg)] = need;
  const bool is_traced = traced(grads[0]);
  if (b.transposed_arg != kAbsent)
    s[size_t(b.transposed_arg)] = is_traced && transposed ? *transposed : c10::List<bool>();
  struct Layout {  // restored on every way out
    explicit Layout(bool on) : was(t_operand_layout) { t_operand_layout = on; }
    ~Layout() { t_operand_layout = was; }
    bool was;
  } layout(!is_traced);
  b.handle->callBoxed(s);
  for (size_t j = 0; j < need.size(); ++j)
    if (need.get(j)) r[size_t(edge_of[size_t(d->grad_of[j])])] = s[j].toTensor();
  return r;
}

// The call's `needs` with the optional outputs the backward reads (plan.write) added.
c10::List<bool> needs_with_plan(const Derived& d, c10::ArrayRef<IValue> args, const Plan& plan) {
  const std::vector<bool> needs = read_needs(d, args);
  c10::List<bool> l;
  for (size_t k = 0; k < needs.size(); ++k) l.push_back(needs[k] || (plan.write >> k & 1u));
  return l;
}

// Runs the call below autograd (the outputs replace its arguments on the stack) and gives its
// first output a node keeping what the backward plan names.
void forward_with_node(const Derived& d, Stack* stack, const std::vector<Tensor>& given) {
  const std::vector<IValue> args(stack->end() - ptrdiff_t(d.num_args), stack->end());
  for (const Tensor& t : given)
    TORCH_CHECK(!t._fw_grad(/*level=*/0).defined(), "dlfuse::", d.name, ": forward-mode AD is not supported");
  const Plan plan = backward_plan(d, args, given.front());
  if (d.needs_arg != kAbsent)
    (*stack)[stack->size() - d.num_args + size_t(d.needs_arg)] = needs_with_plan(d, args, plan);
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    d.handle->callBoxed(stack);
  }
  const auto outs = torch::jit::last(*stack, size_t(d.sc.num_outputs));
  auto node = new_node<DerivedNode>();
  node->d = &d;
  node->set_next_edges(torch::autograd::collect_next_edges(given));
  torch::autograd::set_history(outs[0].toTensor(), node);  // before saving outputs: no cycle
  if (!plan.unavailable.empty()) {
    node->unavailable = plan.unavailable;
    return;
  }
  node->edge_of.assign(size_t(d.sc.num_inputs), kAbsent);
  for (int32_t i = 0, e = 0; i < d.sc.num_inputs; ++i)
    if (args[size_t(d.in_arg[size_t(i)])].isTensor()) node->edge_of[size_t(i)] = e++;
  node->saved.resize(d.saved_from.empty() ? 0 : d.saved_from.size() - 1);
  for (size_t i = 1; i < d.saved_from.size(); ++i)
    if (plan.keep >> i & 1u) {
      const int code = d.saved_from[i];
      const Tensor t = forward_tensor(d, args, outs, code);
      if (t.defined()) node->saved[i - 1] = torch::autograd::SavedVariable(t, /*is_output=*/code < 0);
    }
  node->pre = backward_args(d, args, outs);
  if (traced(given.front())) node->transposed = transposed_inputs(d, args);  // eager: layout in apply
}

struct AutogradKernel final : c10::OperatorKernel {
  explicit AutogradKernel(const Derived* d) : d(d) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const auto last = torch::jit::last(*stack, d->num_args);
    bool grad = false;
    for (int a : d->in_arg) grad = grad || (last[size_t(a)].isTensor() && last[size_t(a)].toTensor().requires_grad());
    if (!grad || !at::GradMode::is_enabled()) {  // no node: the kernel, as the call asked
      at::AutoDispatchBelowADInplaceOrView guard;
      d->handle->callBoxed(stack);
      return;
    }
    std::vector<Tensor> given;  // the forward inputs that are tensors, in input order: the edges
    for (int a : d->in_arg)
      if (last[size_t(a)].isTensor()) given.push_back(last[size_t(a)].toTensor());
    forward_with_node(*d, stack, given);
  }
  const Derived* d;
};

// ---- deriving ---------------------------------------------------------------------------------

// Where each input, attribute, `needs` and `<x>_shape` sits among the torch arguments.
void map_arguments(Derived& d) {
  const auto& targs = d.handle->schema().arguments();
  d.num_args = targs.size();
  d.in_arg.assign(size_t(d.sc.num_inputs), kAbsent);
  d.attr_arg.assign(size_t(d.sc.num_attrs), kAbsent);
  d.shape_arg.assign(size_t(d.sc.num_outputs), kAbsent);
  d.grad_input.assign(size_t(d.sc.num_outputs), kAbsent);
  for (int32_t o = 0; o < d.sc.num_outputs; ++o) {
    const std::string n = d.sc.outputs[o].name;
    if (n.rfind("grad_", 0) == 0) d.grad_input[size_t(o)] = d.input(n.substr(5));
  }
  for (size_t k = 0; k < targs.size(); ++k) {
    const std::string& n = targs[k].name();
    const int a = int(k);
    if (int i = d.input(n); i != kAbsent) {
      d.in_arg[size_t(i)] = a;
    } else if (n == "needs") {
      d.needs_arg = a;
    } else if (n == "transposed") {
      d.transposed_arg = a;
    } else if (n.size() > 6 && n.compare(n.size() - 6, 6, "_shape") == 0) {
      for (int32_t o = 0; o < d.sc.num_outputs; ++o)
        if (grad_stem(d.sc.outputs[o].name) == n.substr(0, n.size() - 6)) d.shape_arg[size_t(o)] = a;
    } else {
      for (int32_t j = 0; j < d.sc.num_attrs; ++j)
        if (lower(d.sc.attrs[j].name) == n) d.attr_arg[size_t(j)] = a;
    }
  }
  for (int32_t i = 0; i < d.sc.num_inputs; ++i)
    TORCH_CHECK(d.in_arg[size_t(i)] != kAbsent, "dlfuse::", d.name, ": the torch schema has no input ",
                d.sc.inputs[i].name);
  for (int32_t j = 0; j < d.sc.num_attrs; ++j)
    TORCH_CHECK(d.attr_arg[size_t(j)] != kAbsent, "dlfuse::", d.name, ": the torch schema has no attribute ",
                lower(d.sc.attrs[j].name));
}

// The backward's inputs named like the forward's inputs or outputs are saved, its attributes
// are the forward's of the same name, its output grad_<x> is the gradient of input x, and its
// `<x>_shape` is the shape of the forward's tensor x.
void wire_backward(Derived& d, const Derived& b) {
  d.bwd = &b;
  auto code_of = [&](const std::string& n) {
    if (int i = d.input(n); i != kAbsent) return i;
    if (int o = d.output(n); o != kAbsent) return -2 - o;
    return kAbsent;
  };
  d.saved_from.assign(size_t(b.sc.num_inputs), kAbsent);
  for (int32_t i = 1; i < b.sc.num_inputs; ++i) d.saved_from[size_t(i)] = code_of(b.sc.inputs[i].name);
  d.attr_from.assign(size_t(b.sc.num_attrs), kAbsent);
  for (int32_t j = 0; j < b.sc.num_attrs; ++j)
    for (int32_t k = 0; k < d.sc.num_attrs; ++k)
      if (lower(b.sc.attrs[j].name) == lower(d.sc.attrs[k].name)) d.attr_from[size_t(j)] = k;
  d.grad_of.assign(size_t(b.sc.num_outputs), kAbsent);
  d.shape_from.assign(size_t(b.sc.num_outputs), kAbsent);
  for (int32_t o = 0; o < b.sc.num_outputs; ++o) {
    const std::string x = grad_stem(b.sc.outputs[o].name);
    d.grad_of[size_t(o)] = d.input(x);
    d.shape_from[size_t(o)] = code_of(x);
  }
}

// The schema of op `name` from the registry's list (no plugin need offer the op).
dlfuse_op_schema_t schema_named(const char* name) {
  const Lib& L = lib();
  int32_t count = 0;
  check(L.registry_op_count(L.reg, &count));
  for (int32_t i = 0; i < count; ++i) {
    dlfuse_op_schema_t sc{};
    sc.struct_size = sizeof sc;
    check(L.registry_op_schema(L.reg, i, &sc));
    if (std::strcmp(sc.name, name) == 0) return sc;
  }
  TORCH_CHECK(false, "dlfuse::", name, ": the registry has no schema of that name");
}

void derive(const char* name, const char* torch_schema, const char* backward) {
  const Lib& L = lib();
  TORCH_CHECK(L.op_call && L.registry_op_count && L.registry_op_schema && L.op_infer_outputs && L.op_backward_plan,
              "dlfuse: derived operators need libdlfuse of ABI >= 1.2");
  auto d = std::make_unique<Derived>();
  d->name = name;
  d->sc = schema_named(name);
  const Derived* b = nullptr;
  if (backward) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_derived.find(backward);
    TORCH_CHECK(it != g_derived.end(), "dlfuse::", name, ": its backward ", backward, " is not derived yet");
    b = it->second;
  }
  // Kept for the process's life: torch's dispatcher may outlive this library's statics.
  auto* lib_ = new torch::Library(torch::Library::FRAGMENT, "dlfuse", std::nullopt, __FILE__, __LINE__);
  lib_->def((std::string(name) + torch_schema).c_str());
  d->handle = c10::Dispatcher::singleton().findSchemaOrThrow(("dlfuse::" + d->name).c_str(), "");
  map_arguments(*d);
  if (b) wire_backward(*d, *b);
  for (c10::DispatchKey k : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA})
    lib_->impl(name, torch::dispatch(k, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(d.get()))));
  if (b)
    lib_->impl(name, torch::dispatch(c10::DispatchKey::Autograd, torch::CppFunction::makeFromBoxedFunctor(
                                                                     std::make_unique<AutogradKernel>(d.get()))));
  const std::string key = d->name;
  std::lock_guard<std::mutex> lk(g_mu);
  g_derived[key] = d.release();
}

}  // namespace

// Defines torch.ops.dlfuse.<name> from the torch schema dlfuse.torch wrote for it (without
// the name), with the C++ kernel for CPU and CUDA and, where `backward` (an op derived
// before) is given, the autograd formula through it. 0, or -1 with *why set (valid until the
// next call on this thread).
extern "C" __attribute__((visibility("default"))) int dlfuse_torch_ops_derive(const char* name,
                                                                              const char* torch_schema,
                                                                              const char* backward, const char** why) {
  static thread_local std::string msg;
  try {
    derive(name, torch_schema, backward);
    return 0;
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown error";
  }
  if (why) *why = msg.c_str();
  return -1;
}
