"""PyTorch integration: every dlfuse op as a differentiable torch function, fast in eager
and traceable by torch.compile.

    import dlfuse.torch as dft
    y = dft.matmul_add_relu(x, w, b)              # differentiable, torch.compile-able
    z = dft.add_mul_activation(x, y, b, 0.5, "silu")
    h = dft.matmul_add_activation(x, w, b, "gelu_tanh")
    r = dft.matmul_add_residual(h, w2, b2, x)     # h @ w2 + b2 + x

Every function (dlfuse.torch.<op>, for the core ops of ops.def and for any op a loaded plugin
declares) and its operator torch.ops.dlfuse.<op> are derived from the op's schema: the torch
schema, the kernel, the fake kernel and, where the registry has <op>_backward, the autograd
formula, which keeps what libdlfuse's backward plan names (dlfuse_op_backward_plan). In eager
mode on plain tensors a function calls the compiled extension directly (no grad needed) or
the operator's autograd kernel (C++ where dlfuse's C++ operators are loaded); outputs come
from torch's allocator and every call runs on torch's current CUDA stream. Under
torch.compile, tensor subclasses, dispatch or torch-function modes and functorch transforms
it calls torch.ops.dlfuse.<op> through the dispatcher, so ``torch.compile(fullgraph=True)``
traces it as an opaque call and CUDA graphs capture it (docs/python.md).
"""

import keyword
import sys
import threading

import torch

from . import _core, _ext, _torch_cpp

__all__ = ["op_function", "FusedLinearReLU", "FusedLinear", "FusedMLP", *_ext.core_ops()]


# True when dlfuse's C++ operators (csrc/torch_derived.cpp) serve torch.ops.dlfuse.*: then
# every call, eager or compiled, and its backward run in torch's dispatcher and autograd
# engine without Python. Else _torch_cpp.why_not says why, and the same operators are
# defined in Python below.
CPP_OPS = _torch_cpp.load()

# Set True to hand the kernels contiguous copies of every input (a debugging aid: it takes
# the plugins' strided-layout paths out of the picture; costs a copy per strided input).
FORCE_CONTIGUOUS = False

# torch >= 2.10 has the DLPack exchange API: the extension takes the current stream and
# allocates through it. Older torch: the stream is passed, outputs come from torch.empty.
_XAPI = _ext.exchange_api(torch.Tensor) is not None

_OPTIONAL, _REDUCIBLE = 1, 2  # DLFUSE_ARG_OPTIONAL, DLFUSE_ARG_REDUCIBLE
# torch.compile's symbolic scalars: passed on as they are (torch's schema checks them)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_TORCH_DTYPE_DL = {torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16),
                   torch.bfloat16: (4, 16)}
_ERRS = (RuntimeError, ValueError, NotImplementedError)
_reraise = _torch_cpp.reraise


def _c(*ts):
    return tuple(t if t is None else t.contiguous() for t in ts)


def _stream(t):
    if not _XAPI and t.device.type == "cuda":
        return torch.cuda.current_stream(t.device).cuda_stream
    return None


def _act(activation, fn, name="activation"):
    return activation if type(activation) is int else _core._act(activation, fn, name)


def _attr(fn, name, kind, value):
    """An attribute's value by its kind in the op's schema (_core.attr_value)."""
    return value if isinstance(value, _SYMBOLIC) else _core.attr_value(fn, name, kind, value)


def _is_transposed(t):
    """t is the transpose of a contiguous tensor (weight.t()), not contiguous itself."""
    return t is not None and t.dim() >= 2 and not t.is_contiguous() and t.transpose(-2, -1).is_contiguous()


# ---- one op's torch operator, from its schema ---------------------------------------------------
#
# torch.ops.dlfuse.<op>'s schema: its inputs (Tensor, Tensor? where optional), its attributes
# (float or int, with their defaults), then `bool[] needs=[]` where an output is optional
# (which optional outputs to compute; empty: all), `bool[] transposed=[]` where an output is a
# gradient grad_<x> (allocate it as the transpose of a contiguous tensor: how a traced
# backward puts weight.t()'s gradient in the weight's layout) and `int[]? <x>_shape=None` for
# each REDUCIBLE output grad_<x>; it returns every output (one not computed is an empty
# tensor). Its kernel and fake kernel allocate the outputs with the shapes of
# dlfuse_op_infer_outputs; where the registry also has `<op>_backward`, that op is its autograd
# formula: the forward keeps the tensors the backward plan names, grad_out is the gradient of
# the first output (the only differentiable one), `needs` says which inputs need a gradient,
# `<x>_shape` is input x's shape and output grad_<x> is x's gradient. With the C++ operators
# loaded (CPP_OPS) the kernel and autograd are C++ by the same rules (csrc/torch_derived.cpp
# reads the arguments by their names in this torch schema); the fake kernel stays here.

_LIB = None


class _Derived:
    """What the torch operator of one dlfuse op needs to know, from its schema."""

    def __init__(self, name):
        self.name = name
        self.inputs, self.outputs, self.attrs = _ext.schema(name, None)
        self.in_names = [n for n, _f, _s in self.inputs]
        self.out_names = [n for n, *_ in self.outputs]
        self.attr_names = [n for n, *_ in self.attrs]
        self.optional_out = [bool(f & _OPTIONAL) for _n, f, *_ in self.outputs]
        self.has_needs = any(self.optional_out)
        self.has_transposed = any(n.startswith("grad_") for n in self.out_names)
        self.shape_params = [(i, (n[5:] if n.startswith("grad_") else n) + "_shape")
                             for i, (n, f, *_) in enumerate(self.outputs) if f & _REDUCIBLE]

    def torch_schema(self):
        args = [f"Tensor{'?' if f & _OPTIONAL else ''} {n}" for n, f, _s in self.inputs]
        for n, is_float, required, default, *_ in self.attrs:
            t = "float" if is_float else "int"
            args.append(f"{t} {n}" if required else f"{t} {n}={default!r}")
        if self.has_needs:
            args.append("bool[] needs=[]")
        if self.has_transposed:
            args.append("bool[] transposed=[]")
        args += [f"int[]? {p}=None" for _i, p in self.shape_params]
        ret = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")"
        return f"({', '.join(args)}) -> {ret}"

    def split(self, args):
        """(inputs, {attr: value}, needs, transposed, {output index: shape}) from the torch
        operator's arguments."""
        n_in, n_at = len(self.inputs), len(self.attrs)
        ins, rest = list(args[:n_in]), list(args[n_in:])
        attrs = dict(zip(self.attr_names, rest[:n_at]))
        rest = rest[n_at:]
        needs = [True] * len(self.outputs)
        transposed = [False] * len(self.outputs)
        for flag, target in ((self.has_needs, needs), (self.has_transposed, transposed)):
            if flag:
                given = list(rest.pop(0)) if rest else []
                if given and len(given) != len(target):
                    raise ValueError(f"dlfuse::{self.name}: a bool[] argument has {len(given)} entries; expected "
                                     f"{len(target)} (one per output) or none")
                target[:] = [bool(v) for v in given] or target
        needs = [n or not o for n, o in zip(needs, self.optional_out)]
        shapes = {i: rest[k] for k, (i, _p) in enumerate(self.shape_params) if k < len(rest) and rest[k] is not None}
        return ins, attrs, needs, transposed, shapes

    def empty_outputs(self, ins, attrs, needs, transposed, shapes):
        like = next(t for t in ins if t is not None)
        code, bits = _TORCH_DTYPE_DL.get(like.dtype, (0, 0))
        inferred = _ext.infer(self.name, [None if t is None else tuple(t.shape) for t in ins], code, bits, attrs, None)
        outs = []
        for i in range(len(self.outputs)):
            shape = tuple(shapes.get(i, inferred[i]))
            if not needs[i]:
                outs.append(like.new_empty((0,)))
            elif transposed[i] and len(shape) >= 2:
                outs.append(like.new_empty((*shape[:-2], shape[-1], shape[-2])).transpose(-2, -1))
            else:
                outs.append(like.new_empty(shape))
        return outs

    def kernel(self, *args):
        ins, attrs, needs, transposed, shapes = self.split(args)
        ins = list(_c(*ins)) if FORCE_CONTIGUOUS else ins
        outs = self.empty_outputs(ins, attrs, needs, transposed, shapes)
        like = next(t for t in ins if t is not None)
        _ext.call(self.name, tuple(ins), attrs, [o if n else False for o, n in zip(outs, needs)], _stream(like), None)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(self, *args):
        outs = self.empty_outputs(*self.split(args))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def plan(self, ins, attrs):
        """(keep, write): libdlfuse's backward plan for a call on these inputs."""
        like = next(t for t in ins if t is not None)
        code, bits = _TORCH_DTYPE_DL.get(like.dtype, (0, 0))
        dev = _core.DEVICE_TYPES["cuda" if like.is_cuda else "cpu"]
        return _backward_plan(self.name, tuple(sorted(attrs.items())), dev, code, bits)


# A constant of the traced program for torch.compile (attributes, device and dtype are).
@torch.compiler.assume_constant_result
def _backward_plan(name, attrs, dev, code, bits):
    _bwd, keep, write = _ext.backward_plan(name, dict(attrs), dev, code, bits, None)
    return keep, write


def _define(name):
    """Defines torch.ops.dlfuse.<name> from the op's schema (its backward first); returns
    (its _Derived, the operator)."""
    global _LIB
    d = _Derived(name)
    if _LIB is None:
        _LIB = torch.library.Library("dlfuse", "FRAGMENT")
    qual = "dlfuse::" + name
    backward = name + "_backward" if name + "_backward" in _core.op_names() else None
    if backward is not None:
        op_function(backward)
    if CPP_OPS:  # kernel and autograd in C++ (csrc/torch_derived.cpp), by the same schema
        _torch_cpp.derive(name, d.torch_schema(), backward)
    else:
        _LIB.define(name + d.torch_schema())
        torch.library.impl(qual, ("CPU", "CUDA"), lib=_LIB)(d.kernel)
        if backward is not None:
            _register_autograd(qual, d, _functions[backward].derived)
    torch.library.register_fake(qual, lib=_LIB)(d.fake)
    return d, getattr(torch.ops.dlfuse, name)


def _register_autograd(qual, d, b):
    """The Python form of csrc/torch_derived.cpp's autograd (where the C++ operators are not
    loaded): the rules above; the forward's optional outputs that the plan keeps were asked
    for by the function (_Function._needs)."""
    bwd_op = getattr(torch.ops.dlfuse, b.name)
    grad_of = [n[5:] if n.startswith("grad_") else n for n in b.out_names]
    n_extra = len(d.attrs) + d.has_needs + d.has_transposed + len(d.shape_params)

    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)  # only the first output's gradient is read
        outs = output if isinstance(output, tuple) else (output,)
        ctx.mark_non_differentiable(*outs[1:])
        ins = inputs[:len(d.in_names)]
        attrs = dict(zip(d.attr_names, inputs[len(d.in_names):len(d.in_names) + len(d.attrs)]))
        try:
            keep, _write = d.plan(ins, attrs)
        except _core.NotFoundError as e:  # no plugin offers the backward: it raises, not the forward
            ctx.unavailable = e
            return
        ctx.unavailable = None
        computed = d.split(inputs)[2]
        by_name = dict(zip(d.in_names, ins))
        by_name.update(zip(d.out_names, outs))
        saved = []
        for i, n in enumerate(b.in_names[1:], 1):
            if not keep >> i & 1:
                saved.append(None)
                continue
            if n in d.out_names and not computed[d.out_names.index(n)]:
                raise RuntimeError(f"dlfuse::{d.name}: the backward reads output '{n}', which this call did not "
                                   f"compute: pass needs with it (dlfuse.torch.{d.name} does)")
            saved.append(by_name.get(n))
        ctx.save_for_backward(*saved)
        ctx.attrs = [attrs.get(n, default) for n, _f, _r, default, *_ in b.attrs]
        ctx.shapes = [None if by_name.get(p[:-6]) is None else list(by_name[p[:-6]].shape) for _i, p in b.shape_params]
        ctx.transposed = [_is_transposed(by_name.get(x)) for x in grad_of]

    def backward(ctx, *grads):
        if grads[0] is None:  # the first output took no part in what is differentiated
            return (None,) * (len(d.in_names) + n_extra)
        if ctx.unavailable is not None:
            raise ctx.unavailable
        needs_in = dict(zip(d.in_names, ctx.needs_input_grad))
        needs = [bool(needs_in.get(n, False)) for n in grad_of]
        extra = ([needs] if b.has_needs else []) + ([ctx.transposed] if b.has_transposed else [])
        res = bwd_op(grads[0], *ctx.saved_tensors, *ctx.attrs, *extra, *ctx.shapes)
        res = res if isinstance(res, tuple) else (res,)
        by_input = {n: (r if k else None) for n, r, k in zip(grad_of, res, needs)}
        return tuple(by_input.get(n) for n in d.in_names) + (None,) * n_extra

    torch.library.register_autograd(qual, backward, setup_context=setup_context, lib=_LIB)


# ---- one op's function, generated from its schema -------------------------------------------------
#
# dlfuse.torch.<op>(inputs..., [attributes...,] *, attributes..., outputs=None, <x>_shape=None):
# inputs positional or by name (None for an absent optional one); attributes by name, with the
# schema's defaults (activations also by their names), and positionally after the inputs for
# the four forward ops of ABI 1.0/1.1 (their documented orders, _core.FRONTEND_SIGNATURES);
# `outputs` names the outputs to compute and return (default: the required ones, or every one
# where all are optional). The function is generated once per op (its parameters are the
# schema's), so a call binds its arguments as any Python function does.

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # nn.Parameter disables __torch_function__ too
_compiling = torch.compiler.is_compiling
_grad_on = torch.is_grad_enabled
_functorch_on = torch._C._are_functorch_transforms_active
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled

_TEMPLATE = '''
def {name}({params}):
    if outputs is None and not _compiling(){plain} and not _functorch_on() and not _dispatch_modes() \\
            and not _function_modes():
        if {grad}:
            return _f.autograd(({ins},), ({attrs},){shapes})
        if _g.FORCE_CONTIGUOUS:
            {ins}, = _c({ins})
        return _fast({fast_kw})
    return _f.dispatch(({ins},), ({attrs},), outputs{shapes})
'''


class _Function:
    """dlfuse.torch.<op>: the generated function and what its calls share."""

    def __init__(self, name):
        self.name = name
        self.derived, self.op = _define(name)
        d = self.derived
        self.default = self.op.default
        positional, defaults = _core.FRONTEND_SIGNATURES.get(name, ((), {}))
        req = [i for i, o in enumerate(d.optional_out) if not o]
        self.wanted = req or list(range(len(d.out_names)))
        self._single = len(d.out_names) == 1
        self._cpp_needs = [not o for o in d.optional_out] if req else []
        self.fn = self._generate(positional, defaults)

    def _generate(self, positional, defaults):
        d = self.derived
        for n in d.in_names + d.attr_names + [p for _i, p in d.shape_params]:
            if keyword.iskeyword(n) or not n.isidentifier() or n in ("outputs",):
                raise ValueError(f"dlfuse.torch: op {self.name}: argument name {n!r} cannot be a parameter")
        params, seen_optional = [], False
        for n, f, _s in d.inputs:
            seen_optional = seen_optional or bool(f & _OPTIONAL)
            params.append(f"{n}=None" if seen_optional else n)
        attr = {n: (required, default, kind) for n, _is_float, required, default, _key, kind in d.attrs}

        def attr_param(n):
            required, default, _kind = attr[n]
            if n in defaults:
                return f"{n}={defaults[n]!r}"
            return n if required else f"{n}={default!r}"
        params += [attr_param(n) for n in positional]
        rest = [attr_param(n) for n in d.attr_names if n not in positional]
        params += ["*"] + rest + ["outputs=None"] + [f"{p}=None" for _i, p in d.shape_params]

        # Each attribute by its kind in the schema (never by its key: a plugin's keys are its
        # own); a float, or an int within int64, passed as it is.
        def conv(n):
            kind = attr[n][2]
            slow = f"_attr({self.name!r}, {n!r}, {kind!r}, {n})"
            if kind == "flag":
                return slow
            if kind == "float":
                return f"({n} if type({n}) is float else {slow})"
            return f"({n} if type({n}) is int and {_core.INT64_MIN} <= {n} <= {_core.INT64_MAX} else {slow})"
        ins = d.in_names
        plain = "".join(f" and type({n}) in _PLAIN" if not f & _OPTIONAL else
                        f" and ({n} is None or type({n}) in _PLAIN)" for n, f, _s in d.inputs)
        grad = "_grad_on() and (" + " or ".join(
            f"{n}.requires_grad" if not f & _OPTIONAL else f"({n} is not None and {n}.requires_grad)"
            for n, f, _s in d.inputs) + ")" if self.derived_backward() else "False"
        # The extension converts the attributes itself (names of activations, truth values);
        # where torch has the DLPack exchange API it also takes torch's current stream.
        fast_kw = "".join(f"{n}={n}, " for n in ins + d.attr_names) + "".join(f"{p}={p}, " for _i, p in d.shape_params)
        fast_kw += "" if _XAPI else f"stream=_stream({ins[0]})"
        src = _TEMPLATE.format(
            name=self.name, params=", ".join(params), ins=", ".join(ins),
            attrs=", ".join(conv(n) for n in d.attr_names), plain=plain, grad=grad,
            shapes="".join(f", {p}" for _i, p in d.shape_params), fast_kw=fast_kw)
        ns = dict(_f=self, _g=sys.modules[__name__], _fast=_core.op_function(self.name), _c=_c, _stream=_stream, _attr=_attr,
                  _PLAIN=_PLAIN, _compiling=_compiling, _grad_on=_grad_on, _functorch_on=_functorch_on,
                  _dispatch_modes=_dispatch_modes, _function_modes=_function_modes)
        exec(compile(src, f"<dlfuse.torch.{self.name}>", "exec"), ns)
        fn = ns[self.name]
        fn.__doc__ = (f"dlfuse op {self.name}, differentiable where the registry has {self.name}_backward: "
                      f"inputs {d.in_names}, attributes {d.attr_names}, outputs {d.out_names} (returns "
                      f"{[d.out_names[i] for i in self.wanted]} by default); torch.ops.dlfuse.{self.name}"
                      f"{d.torch_schema()}")
        fn.op = self.op
        return fn

    def derived_backward(self):
        return self.name + "_backward" in _core.op_names()

    def _needs(self, outputs, ins, attrs, grad):
        """The `needs` argument: the outputs asked for, and those the backward plan keeps."""
        d = self.derived
        if not d.has_needs:
            return None, self.wanted
        if outputs is None:
            wanted = self.wanted
        else:
            names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
            bad = [n for n in names if n not in d.out_names]
            if bad or not names:
                raise TypeError(f"{self.name}(): outputs names {bad or 'nothing'}; expected some of {d.out_names}")
            wanted = [d.out_names.index(n) for n in names]
        needs = [i in wanted or not o for i, o in enumerate(d.optional_out)]
        if grad and not CPP_OPS:  # the C++ autograd adds them itself
            try:
                _keep, write = d.plan(ins, dict(zip(d.attr_names, attrs)))
            except _core.NotFoundError:  # no backward offered: its node raises if it runs
                write = 0
            needs = [n or bool(write >> i & 1) for i, n in enumerate(needs)]
        return needs, wanted

    def _args(self, ins, attrs, needs, shapes):
        d = self.derived
        extra = ([needs] if d.has_needs else []) + ([[]] if d.has_transposed else [])
        return (*ins, *attrs, *extra, *shapes)

    def _pick(self, res, wanted):
        res = res if isinstance(res, tuple) else (res,)
        return res[wanted[0]] if len(wanted) == 1 else tuple(res[i] for i in wanted)

    def autograd(self, ins, attrs, *shapes):
        """Eager, plain tensors, a gradient needed: the operator's autograd kernel, skipping
        the dispatcher's Python layers."""
        if FORCE_CONTIGUOUS:
            ins = _c(*ins)
        if CPP_OPS:  # the C++ autograd writes the outputs the backward plan needs itself
            needs, wanted = self._cpp_needs, self.wanted
        else:
            needs, wanted = self._needs(None, ins, attrs, True)
        try:
            res = self.default(*self._args(ins, attrs, needs, shapes))
        except _ERRS as e:
            _reraise(e)
        return res if self._single else self._pick(res, wanted)

    def _check_inputs(self, ins):
        """TypeError naming the first input that is not a tensor (None where optional)."""
        for (n, f, _s), t in zip(self.derived.inputs, ins):
            if not isinstance(t, torch.Tensor) and (t is not None or not f & _OPTIONAL):
                want = "a torch.Tensor" + (" or None" if f & _OPTIONAL else "")
                raise TypeError(f"dlfuse.torch.{self.name}(): {n} must be {want}, got {type(t).__name__} "
                                f"{_core.short_repr(t)}")

    def dispatch(self, ins, attrs, outputs, *shapes):
        """Anything else (torch.compile, subclasses, modes, functorch, `outputs` given): the
        operator through the dispatcher."""
        self._check_inputs(ins)
        grad = _grad_on() and any(t is not None and t.requires_grad for t in ins)
        needs, wanted = self._needs(outputs, ins, attrs, grad)
        try:
            return self._pick(self.op(*self._args(ins, attrs, needs, shapes)), wanted)
        except _ERRS as e:
            _reraise(e)


_functions = {}
_define_lock = threading.RLock()  # re-entered: defining an op defines its backward first


def op_function(name):
    """dlfuse.torch's function of op `name`: a core op or one a loaded plugin declares,
    generated from its schema on first use (docs/python.md). Its operator is `.op`."""
    f = _functions.get(name)
    if f is not None:
        return f.fn
    with _define_lock:
        f = _functions.get(name)
        if f is None:
            _core.require_op(name, "dlfuse.torch")
            f = _Function(name)
            _functions[name] = f
            # a module attribute from now on: dlfuse.torch.<op> then costs a dict lookup, not
            # __getattr__ and a listing of the registry's ops per call
            globals().setdefault(name, f.fn)
    return f.fn


# ---- modules ----------------------------------------------------------------------------------


class FusedLinearReLU(torch.nn.Linear):
    """nn.Linear followed by ReLU, as one dlfuse matmul_add_relu (x @ W^T + b; W^T is a
    strided view, which the plugins take as is)."""

    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)
        self._op = op_function("matmul_add_relu")

    def forward(self, x):
        return self._op(x, self.weight.t(), self.bias)


class FusedLinear(torch.nn.Linear):
    """nn.Linear followed by an activation (a name or dlfuse_activation_t integer, see
    matmul_add_activation), as one dlfuse matmul_add_activation."""

    def __init__(self, in_features, out_features, activation="relu", device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)
        self.activation = _act(activation, "FusedLinear")
        self._op = op_function("matmul_add_activation")

    def forward(self, x):
        return self._op(x, self.weight.t(), self.bias, self.activation)

    def extra_repr(self):
        return f"{super().extra_repr()}, activation={self.activation}"


_OUT_FORM = frozenset((0, 1, 2, 3))  # identity, relu, sigmoid, tanh: mlp_backward's activations


class FusedMLP(torch.nn.Module):
    """Linear layers with activations, run as one dlfuse `mlp` call forward and one
    `mlp_backward` call backward (ABI 1.2; docs/ops.md). `sizes` = (in_features, hidden...,
    out_features): 2 to 8 entries, 1 to 7 layers. `activation` follows every layer but the
    last, `output_activation` the last; both IDENTITY, RELU, SIGMOID or TANH (the backward
    takes each derivative from the layer's output). The parameters are nn.Linear's
    (`layers[i].weight` [out, in], `layers[i].bias`); the op reads each weight transposed, a
    strided view. x is [..., in_features]."""

    def __init__(self, sizes, activation="relu", output_activation="identity", allow_tf32=False, device=None,
                 dtype=None):
        super().__init__()
        sizes = [int(s) for s in sizes]
        if not 2 <= len(sizes) <= 8:
            raise ValueError(f"FusedMLP: sizes has {len(sizes)} entries; expected 2 to 8 (1 to 7 layers)")
        self.activation = _act(activation, "FusedMLP")
        self.output_activation = _act(output_activation, "FusedMLP", "output_activation")
        for name, a in (("activation", self.activation), ("output_activation", self.output_activation)):
            if a not in _OUT_FORM:
                raise ValueError(f"FusedMLP: {name} is {a}; expected identity, relu, sigmoid or tanh (the "
                                 f"backward takes each derivative from the layer's output)")
        self.allow_tf32 = bool(allow_tf32)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o, device=device, dtype=dtype)
                                          for i, o in zip(sizes[:-1], sizes[1:]))
        op_function("mlp")  # defined here: defining locks, which torch.compile cannot trace

    def forward(self, x):
        if x.dim() < 1 or x.shape[-1] != self.layers[0].in_features:
            raise ValueError(f"FusedMLP: x has shape {tuple(x.shape)}; expected [..., "
                             f"{self.layers[0].in_features}]")
        rows = x.reshape(-1, x.shape[-1])
        pad = [None] * (7 - len(self.layers))
        out = op_function("mlp")(rows, *(l.weight.t() for l in self.layers), *pad, *(l.bias for l in self.layers), *pad,
                     activation=self.activation, output_activation=self.output_activation,
                     allow_tf32=int(self.allow_tf32))
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def extra_repr(self):
        return (f"sizes={[self.layers[0].in_features] + [l.out_features for l in self.layers]}, "
                f"activation={self.activation}, output_activation={self.output_activation}")


def __getattr__(name):
    """dlfuse.torch.<op> for every op of the default registry (derived from its schema)."""
    if not name.startswith("_"):
        try:
            if name in _core.op_names():
                return op_function(name)
        except (_core.Error, OSError):
            pass
    raise AttributeError(f"module 'dlfuse.torch' has no attribute {name!r}")


# The core ops' operators exist from import on (torch.ops.dlfuse.<op> before any call); a
# plugin's own ops are defined on first use. Without libdlfuse, on first use too (the error
# says what was tried).
try:
    for _name in _ext.core_ops():
        op_function(_name)
except (_core.Error, OSError):
    pass
