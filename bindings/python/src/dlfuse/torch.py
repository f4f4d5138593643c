"""PyTorch integration: differentiable ops that are fast in eager and traceable by
torch.compile.

    import dlfuse.torch as dft
    y = dft.matmul_add_relu(x, w, b)              # differentiable, torch.compile-able
    z = dft.add_mul_activation(x, y, b, 0.5, "silu")
    h = dft.matmul_add_activation(x, w, b, "gelu_tanh")
    r = dft.matmul_add_residual(h, w2, b2, x)     # h @ w2 + b2 + x

In eager mode on plain tensors the public functions call the compiled extension directly
(no grad needed) or through an autograd Function whose apply goes straight to torch's C
implementation; outputs and gradients are allocated by torch's own allocator through its
DLPack exchange API, and every call runs on torch's current CUDA stream. Under
torch.compile, tensor subclasses, dispatch or torch-function modes and functorch
transforms they dispatch to the torch.library custom ops ``torch.ops.dlfuse.*`` (fake
kernels and autograd formulas registered), so ``torch.compile(fullgraph=True)`` traces
them as opaque calls and CUDA graphs capture them (docs/python.md).
"""

import threading
from typing import List, Tuple

import torch

from . import _core, _ext, _torch_cpp

__all__ = ["matmul_add_relu", "add_mul_activation", "matmul_add_activation", "op_function",
           "matmul_add_residual", "MatmulAddRelu", "AddMulActivation", "MatmulAddActivation",
           "MatmulAddResidual", "FusedLinearReLU", "FusedLinear", "FusedMLP"]


# True when dlfuse's C++ operators (csrc/torch_ops.cpp) serve torch.ops.dlfuse.*: then every
# call, eager or compiled, and its backward run in torch's dispatcher and autograd engine
# without Python. Else _torch_cpp.why_not says why, and the same operators are defined in
# Python below.
CPP_OPS = _torch_cpp.load()

# Set True to hand the kernels contiguous copies of every input (a debugging aid: it takes
# the plugins' strided-layout paths out of the picture; costs a copy per strided input).
FORCE_CONTIGUOUS = False

# torch >= 2.10 has the DLPack exchange API: the extension takes the current stream and
# allocates through it. Older torch: the stream is passed, outputs come from torch.empty.
_XAPI = _ext.exchange_api(torch.Tensor) is not None


def _c(*ts):
    return tuple(t.contiguous() for t in ts) if FORCE_CONTIGUOUS else ts


def _stream(t):
    if not _XAPI and t.device.type == "cuda":
        return torch.cuda.current_stream(t.device).cuda_stream
    return None


def _mm_shape(a, b):
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1])


def _act(activation):  # inlined where a call counts
    return activation if type(activation) is int else _core._act(activation)


# identity, relu, sigmoid, tanh: act' is a function of act's output, so a backward can read
# `out` (which the next layer usually keeps anyway) instead of the forward's inputs or `pre`.
_OUT_FORM = frozenset((0, 1, 2, 3))


# ---- which add_mul_activation_backward form the serving kernel takes ----------------------
#
# The out form of add_mul_activation_backward is an input that ABI 1.1 appended to a 1.0 op:
# a kernel takes it only if it declares DLFUSE_KERNEL_TAKES_V1_1_INPUTS (dlfuse's plugins
# do; a third party's may not). The forward decides what to save, so it asks once per (CPU or
# CUDA, dtype).

_out_form_cache = {}


_takes_out_form = _core.kernel_takes_out_form


def _amc_out_ok(t):
    # is_cuda, not device.type (which makes a torch.device per call): dlfuse serves torch's
    # CPU and CUDA tensors, and what another device's tensor gets saved does not matter
    # (its forward fails)
    key = (t.is_cuda, t.dtype)
    ok = _out_form_cache.get(key)
    if ok is None:
        ok = _out_form_cache[key] = _takes_out_form("cuda" if key[0] else "cpu", key[1])
    return ok


def _amc_grads_from_out_torch(grad, out, multiplier, act, shapes, needs):
    """The out form's formulas (docs/ops.md) in torch ops, for a backward whose forward saved
    `out` and whose kernel now refuses it (a plugin was loaded or preferred in between)."""
    if act == 1:  # a select: NaN passes, a blocked NaN/Inf gradient gives 0
        zero = torch.zeros((), dtype=grad.dtype, device=grad.device)
        d = torch.where((out > 0) | out.isnan(), grad, zero)
    elif act == 2:
        d = grad * out * (1 - out)
    elif act == 3:
        d = grad * (1 - out * out)
    else:
        d = grad
    return tuple((d * multiplier if i == 1 else d).sum_to_size(tuple(sh)).clone() if need else None
                 for i, (sh, need) in enumerate(zip(shapes, needs)))


# ---- eager kernels (the extension; outputs allocated by torch) ------------------------------

def _mar_fwd(a, b, bias, allow_tf32):
    if FORCE_CONTIGUOUS:
        a, b, bias = _c(a, b, bias)
    return _core.matmul_add_relu(a, b, bias, None, _stream(a), allow_tf32=allow_tf32)


def _grad_b_for(b, needs):
    """For weight.t(), grad_b in the weight's layout (autograd then accumulates it without a
    copy); else None: the extension allocates it contiguous."""
    return _operand_grad(b, True, False, True) if needs[1] and _is_transposed(b) else None


def _mar_bwd(grad_out, a, b, out, bias_shape, needs, allow_tf32):
    if FORCE_CONTIGUOUS:
        grad_out, a, b, out = _c(grad_out, a, b, out)
    return _core.matmul_add_relu_backward(grad_out, a, b, out, bias_shape=bias_shape, needs=needs,
                                         grad_b=_grad_b_for(b, needs), stream=_stream(a),
                                         allow_tf32=allow_tf32)


def _amc_fwd(x, y, bias, multiplier, activation):
    if FORCE_CONTIGUOUS:
        x, y, bias = _c(x, y, bias)
    return _core.add_mul_activation(x, y, bias, multiplier, activation, None, _stream(x))


def _amc_bwd(grad_out, x, y, bias, multiplier, activation, needs):
    if FORCE_CONTIGUOUS:
        grad_out, x, y, bias = _c(grad_out, x, y, bias)
    return _core.add_mul_activation_backward(grad_out, x, y, bias, multiplier, activation,
                                            needs=needs, stream=_stream(x))


_amc_bwd_c = _core.add_mul_activation_backward  # one name, so a test can make it refuse


def _amc_bwd_out(grad_out, out, multiplier, activation, shapes, needs, grads=(None, None, None)):
    """add_mul_activation's gradients from its output (identity, relu, sigmoid, tanh)."""
    if FORCE_CONTIGUOUS:
        grad_out, out = _c(grad_out, out)
    try:
        return _amc_bwd_c(grad_out, None, None, None, multiplier, activation, needs=needs,
                          grad_x=grads[0], grad_y=grads[1], grad_bias=grads[2], stream=_stream(out),
                          out=out, x_shape=shapes[0], y_shape=shapes[1], bias_shape=shapes[2])
    except _core.UnsupportedError:
        _out_form_cache.clear()  # the registry changed since the forward chose: ask again
        res = _amc_grads_from_out_torch(grad_out, out, multiplier, activation, shapes, needs)
        for g, r in zip(grads, res):
            if g is not None:
                g.copy_(r)
        return tuple(g if g is not None else r for g, r in zip(grads, res))


def _maa_fwd(a, b, bias, activation, want_pre, allow_tf32):
    if FORCE_CONTIGUOUS:
        a, b, bias = _c(a, b, bias)
    return _core.matmul_add_activation(a, b, bias, activation, None, want_pre, stream=_stream(a),
                                      allow_tf32=allow_tf32)


def _maa_bwd(grad_out, a, b, saved, activation, saved_is_pre, bias_shape, needs, allow_tf32):
    if FORCE_CONTIGUOUS:
        grad_out, a, b, saved = _c(grad_out, a, b, saved)
    out, pre = (None, saved) if saved_is_pre else (saved, None)
    return _core.matmul_add_activation_backward(grad_out, a, b, activation, out, pre,
                                               bias_shape=bias_shape, needs=needs,
                                               grad_b=_grad_b_for(b, needs), stream=_stream(a),
                                               allow_tf32=allow_tf32)


def _mres_fwd(a, b, bias, residual, allow_tf32):
    if FORCE_CONTIGUOUS:
        a, b, bias, residual = _c(a, b, bias, residual)
    return _core.matmul_add_residual(a, b, bias, residual, None, stream=_stream(a),
                                    allow_tf32=allow_tf32)


def _mres_bwd(grad_out, a, b, bias_shape, residual_shape, needs, allow_tf32):
    if FORCE_CONTIGUOUS:
        grad_out, a, b = _c(grad_out, a, b)
    return _core.matmul_add_residual_backward(grad_out, a, b, bias_shape, residual_shape,
                                             needs=needs, grad_b=_grad_b_for(b, needs),
                                             stream=_stream(a), allow_tf32=allow_tf32)


# ---- fake (meta) kernels: output shapes for torch.compile and opcheck ----------------------

def _empty_grads(like, shapes, needs):
    """Custom ops return tensors: an unwanted gradient is an empty one."""
    return tuple(like.new_empty(tuple(sh) if n else (0,)) for sh, n in zip(shapes, needs))


def _is_transposed(t):
    """t is the transpose of a contiguous tensor (weight.t()), not contiguous itself."""
    return t.dim() >= 2 and not t.is_contiguous() and t.transpose(-2, -1).is_contiguous()


def _operand_grad(t, need, layout, transposed):
    if not need:
        return t.new_empty((0,))
    if layout:
        return torch.empty_like(t)
    if transposed and t.dim() >= 2:
        return t.new_empty((*t.shape[:-2], t.shape[-1], t.shape[-2])).transpose(-2, -1)
    return t.new_empty(t.shape)


def _matmul_grads(a, b, rest, needs, operand_layout, transposed_b):
    """grad_a, grad_b: with operand_layout in their operand's layout where it is dense (for
    weight.t() the weight's, which autograd accumulates into .grad without a copy; the C++
    operators' eager backward asks for it); else grad_b with transposed_b as the transpose of
    a contiguous tensor (the traced backward's way to the weight's layout: fixed when the
    graph is traced, not read from the run's strides); else contiguous. Then the others as
    _empty_grads."""
    return (_operand_grad(a, needs[0], operand_layout, False),
            _operand_grad(b, needs[1], operand_layout, transposed_b)) + _empty_grads(a, rest, needs[2:])


def _fake_mar(a, b, bias, allow_tf32=False):
    return a.new_empty(_mm_shape(a, b))


def _fake_mar_bwd(grad_out, a, b, out, bias_shape, needs_a, needs_b, needs_bias, allow_tf32=False,
                  operand_layout=False, transposed_b=False):
    return _matmul_grads(a, b, (bias_shape,), (needs_a, needs_b, needs_bias), operand_layout, transposed_b)


def _fake_amc(x, y, bias, multiplier=1.0, activation=1):
    return x.new_empty(torch.broadcast_shapes(x.shape, y.shape, bias.shape))


def _fake_amc_bwd(grad_out, x, y, bias, multiplier, activation, needs_x, needs_y, needs_bias):
    return (x.new_empty(x.shape if needs_x else (0,)), x.new_empty(y.shape if needs_y else (0,)),
            x.new_empty(bias.shape if needs_bias else (0,)))


def _fake_amc_bwd_out(grad_out, out, multiplier, activation, x_shape, y_shape, bias_shape, needs_x, needs_y,
                      needs_bias):
    return _empty_grads(out, (x_shape, y_shape, bias_shape), (needs_x, needs_y, needs_bias))


def _fake_maa(a, b, bias, activation, save_pre=False, allow_tf32=False):
    return a.new_empty(_mm_shape(a, b)), a.new_empty(_mm_shape(a, b) if save_pre else (0,))


def _fake_maa_bwd(grad_out, a, b, saved, activation, saved_is_pre, bias_shape, needs_a, needs_b,
                  needs_bias, allow_tf32=False, operand_layout=False, transposed_b=False):
    return _matmul_grads(a, b, (bias_shape,), (needs_a, needs_b, needs_bias), operand_layout, transposed_b)


def _fake_mres(a, b, bias, residual, allow_tf32=False):
    return a.new_empty(_mm_shape(a, b))


def _fake_mres_bwd(grad_out, a, b, bias_shape, residual_shape, needs_a, needs_b, needs_bias,
                   needs_residual, allow_tf32=False, operand_layout=False, transposed_b=False):
    return _matmul_grads(a, b, (bias_shape, residual_shape),
                         (needs_a, needs_b, needs_bias, needs_residual), operand_layout, transposed_b)


_FAKES = {
    "matmul_add_relu": _fake_mar,
    "matmul_add_relu_backward": _fake_mar_bwd,
    "add_mul_activation": _fake_amc,
    "add_mul_activation_backward": _fake_amc_bwd,
    "add_mul_activation_backward_from_out": _fake_amc_bwd_out,
    "matmul_add_activation": _fake_maa,
    "matmul_add_activation_backward": _fake_maa_bwd,
    "matmul_add_residual": _fake_mres,
    "matmul_add_residual_backward": _fake_mres_bwd,
}


# ---- torch.library custom ops in Python (where the C++ operators are not loaded) ----------

def _define_python_ops():
    @torch.library.custom_op("dlfuse::matmul_add_relu", mutates_args=())
    def _op_mar(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                allow_tf32: bool = False) -> torch.Tensor:
        # Under torch.compile the outputs must come from torch.empty: CUDA-graph trees
        # (mode="reduce-overhead") free them through the caching allocator's own deleter.
        a, b, bias = _c(a, b, bias)
        return _core.matmul_add_relu(a, b, bias, a.new_empty(_mm_shape(a, b)), _stream(a),
                                    allow_tf32=allow_tf32)

    @torch.library.custom_op("dlfuse::matmul_add_relu_backward", mutates_args=())
    def _op_mar_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                    bias_shape: List[int], needs_a: bool, needs_b: bool, needs_bias: bool,
                    allow_tf32: bool = False, operand_layout: bool = False,
                    transposed_b: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_out, a, b, out = _c(grad_out, a, b, out)
        # custom ops return tensors: an unwanted gradient is an empty one (allocated by torch,
        # as in _op_mar)
        ga, gb, gbias = _matmul_grads(a, b, (bias_shape,), (needs_a, needs_b, needs_bias), operand_layout,
                                      transposed_b)
        _core.matmul_add_relu_backward(grad_out, a, b, out, bias_shape=tuple(bias_shape),
                                      needs=(needs_a, needs_b, needs_bias), grad_a=ga if needs_a else None,
                                      grad_b=gb if needs_b else None, grad_bias=gbias if needs_bias else None,
                                      stream=_stream(a), allow_tf32=allow_tf32)
        return ga, gb, gbias

    def _mar_setup(ctx, inputs, output):
        a, b, bias, allow_tf32 = inputs
        ctx.save_for_backward(a, b, output)
        ctx.bias_shape = list(bias.shape)
        ctx.allow_tf32 = allow_tf32

    def _mar_backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        na, nb, nbias = ctx.needs_input_grad[:3]
        ga, gb, gbias = torch.ops.dlfuse.matmul_add_relu_backward(
            grad, a, b, out, ctx.bias_shape, na, nb, nbias, ctx.allow_tf32, False, _is_transposed(b))
        return (ga if na else None, gb if nb else None, gbias if nbias else None, None)

    _op_mar.register_autograd(_mar_backward, setup_context=_mar_setup)

    @torch.library.custom_op("dlfuse::add_mul_activation", mutates_args=())
    def _op_amc(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, multiplier: float = 1.0,
                activation: int = 1) -> torch.Tensor:
        x, y, bias = _c(x, y, bias)  # outputs from torch.empty, as in _op_mar
        out = x.new_empty(torch.broadcast_shapes(x.shape, y.shape, bias.shape))
        return _core.add_mul_activation(x, y, bias, multiplier, activation, out, _stream(x))

    @torch.library.custom_op("dlfuse::add_mul_activation_backward", mutates_args=())
    def _op_amc_bwd(grad_out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor,
                    multiplier: float, activation: int, needs_x: bool, needs_y: bool,
                    needs_bias: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_out, x, y, bias = _c(grad_out, x, y, bias)  # outputs from torch.empty, as in _op_mar
        gx, gy, gb = (x.new_empty(x.shape if needs_x else (0,)), x.new_empty(y.shape if needs_y else (0,)),
                      x.new_empty(bias.shape if needs_bias else (0,)))
        _core.add_mul_activation_backward(grad_out, x, y, bias, multiplier, activation,
                                         needs=(needs_x, needs_y, needs_bias), grad_x=gx if needs_x else None,
                                         grad_y=gy if needs_y else None, grad_bias=gb if needs_bias else None,
                                         stream=_stream(x))
        return gx, gy, gb

    @torch.library.custom_op("dlfuse::add_mul_activation_backward_from_out", mutates_args=())
    def _op_amc_bwd_out(grad_out: torch.Tensor, out: torch.Tensor, multiplier: float, activation: int,
                        x_shape: List[int], y_shape: List[int], bias_shape: List[int], needs_x: bool,
                        needs_y: bool, needs_bias: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_out, out = _c(grad_out, out)
        shapes, needs = (x_shape, y_shape, bias_shape), (needs_x, needs_y, needs_bias)
        gs = _empty_grads(out, shapes, needs)
        _amc_bwd_out(grad_out, out, multiplier, activation, shapes, needs,
                     tuple(g if n else None for g, n in zip(gs, needs)))
        return gs

    def _amc_setup(ctx, inputs, output):
        x, y, bias, multiplier, activation = inputs
        ctx.multiplier = multiplier
        ctx.activation = activation
        if activation in _OUT_FORM and _amc_out_ok(output):
            # only `out`: autograd's version counter still catches an in-place change of it
            ctx.save_for_backward(output)
            ctx.shapes = (list(x.shape), list(y.shape), list(bias.shape))
        else:
            ctx.save_for_backward(x, y, bias)
            ctx.shapes = None

    def _amc_backward(ctx, grad):
        nx, ny, nb = ctx.needs_input_grad[:3]
        if ctx.shapes is not None:
            (out,) = ctx.saved_tensors
            gx, gy, gb = torch.ops.dlfuse.add_mul_activation_backward_from_out(
                grad, out, ctx.multiplier, ctx.activation, *ctx.shapes, nx, ny, nb)
        else:
            x, y, bias = ctx.saved_tensors
            gx, gy, gb = torch.ops.dlfuse.add_mul_activation_backward(
                grad, x, y, bias, ctx.multiplier, ctx.activation, nx, ny, nb)
        return (gx if nx else None, gy if ny else None, gb if nb else None, None, None)

    _op_amc.register_autograd(_amc_backward, setup_context=_amc_setup)

    # matmul_add_activation returns (out, pre): pre is written only with save_pre (the backward
    # of gelu and silu reads it; the others read out), else it is an empty tensor.
    @torch.library.custom_op("dlfuse::matmul_add_activation", mutates_args=())
    def _op_maa(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, activation: int,
                save_pre: bool = False, allow_tf32: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        a, b, bias = _c(a, b, bias)  # outputs from torch.empty, as in _op_mar
        out = a.new_empty(_mm_shape(a, b))
        if not save_pre:
            _core.matmul_add_activation(a, b, bias, activation, out, None, stream=_stream(a),
                                       allow_tf32=allow_tf32)
            return out, a.new_empty((0,))
        pre = a.new_empty(_mm_shape(a, b))
        _core.matmul_add_activation(a, b, bias, activation, out, pre, stream=_stream(a),
                                   allow_tf32=allow_tf32)
        return out, pre

    @torch.library.custom_op("dlfuse::matmul_add_activation_backward", mutates_args=())
    def _op_maa_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, saved: torch.Tensor,
                    activation: int, saved_is_pre: bool, bias_shape: List[int], needs_a: bool,
                    needs_b: bool, needs_bias: bool, allow_tf32: bool = False,
                    operand_layout: bool = False,
                    transposed_b: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_out, a, b, saved = _c(grad_out, a, b, saved)
        needs = (needs_a, needs_b, needs_bias)
        gs = _matmul_grads(a, b, (bias_shape,), needs, operand_layout, transposed_b)
        ga, gb, gbias = (g if n else None for g, n in zip(gs, needs))
        out, pre = (None, saved) if saved_is_pre else (saved, None)
        _core.matmul_add_activation_backward(grad_out, a, b, activation, out, pre,
                                            bias_shape=tuple(bias_shape), needs=needs, grad_a=ga,
                                            grad_b=gb, grad_bias=gbias, stream=_stream(a),
                                            allow_tf32=allow_tf32)
        return gs

    def _maa_setup(ctx, inputs, output):
        a, b, bias, activation, save_pre, allow_tf32 = inputs
        out, pre = output
        ctx.mark_non_differentiable(pre)
        ctx.saved_is_pre = activation not in _OUT_FORM
        if ctx.saved_is_pre and not save_pre:
            raise RuntimeError(
                "dlfuse::matmul_add_activation: the gradient of this activation reads pre: call the "
                "op with save_pre=True when an input requires grad (dlfuse.torch."
                "matmul_add_activation does)")
        ctx.save_for_backward(a, b, pre if ctx.saved_is_pre else out)
        ctx.activation = activation
        ctx.bias_shape = list(bias.shape)
        ctx.allow_tf32 = allow_tf32

    def _maa_backward(ctx, grad, _grad_pre):
        a, b, saved = ctx.saved_tensors
        na, nb, nbias = ctx.needs_input_grad[:3]
        ga, gb, gbias = torch.ops.dlfuse.matmul_add_activation_backward(
            grad, a, b, saved, ctx.activation, ctx.saved_is_pre, ctx.bias_shape, na, nb, nbias,
            ctx.allow_tf32, False, _is_transposed(b))
        return (ga if na else None, gb if nb else None, gbias if nbias else None, None, None, None)

    _op_maa.register_autograd(_maa_backward, setup_context=_maa_setup)

    @torch.library.custom_op("dlfuse::matmul_add_residual", mutates_args=())
    def _op_mres(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
                 allow_tf32: bool = False) -> torch.Tensor:
        a, b, bias, residual = _c(a, b, bias, residual)  # outputs from torch.empty, as in _op_mar
        return _core.matmul_add_residual(a, b, bias, residual, a.new_empty(_mm_shape(a, b)),
                                        stream=_stream(a), allow_tf32=allow_tf32)

    @torch.library.custom_op("dlfuse::matmul_add_residual_backward", mutates_args=())
    def _op_mres_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias_shape: List[int],
                     residual_shape: List[int], needs_a: bool, needs_b: bool, needs_bias: bool,
                     needs_residual: bool, allow_tf32: bool = False, operand_layout: bool = False,
                     transposed_b: bool = False
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_out, a, b = _c(grad_out, a, b)
        needs = (needs_a, needs_b, needs_bias, needs_residual)
        gs = _matmul_grads(a, b, (bias_shape, residual_shape), needs, operand_layout, transposed_b)
        g = [t if n else None for t, n in zip(gs, needs)]
        _core.matmul_add_residual_backward(grad_out, a, b, tuple(bias_shape), tuple(residual_shape),
                                          needs=needs, grad_a=g[0], grad_b=g[1], grad_bias=g[2],
                                          grad_residual=g[3], stream=_stream(a), allow_tf32=allow_tf32)
        return gs

    def _mres_setup(ctx, inputs, output):
        a, b, bias, residual, allow_tf32 = inputs
        ctx.save_for_backward(a, b)  # bias and residual: their shapes are enough
        ctx.shapes = (list(bias.shape), list(residual.shape))
        ctx.allow_tf32 = allow_tf32

    def _mres_backward(ctx, grad):
        a, b = ctx.saved_tensors
        needs = ctx.needs_input_grad[:4]
        gs = torch.ops.dlfuse.matmul_add_residual_backward(grad, a, b, *ctx.shapes, *needs,
                                                           ctx.allow_tf32, False, _is_transposed(b))
        return (*(g if n else None for g, n in zip(gs, needs)), None)

    _op_mres.register_autograd(_mres_backward, setup_context=_mres_setup)


if not CPP_OPS:
    _define_python_ops()
for _name, _fake in _FAKES.items():
    torch.library.register_fake("dlfuse::" + _name)(_fake)


# ---- plain autograd Functions (eager; the same kernels without the dispatcher) -------------

class MatmulAddRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, bias, allow_tf32=False):
        out = _mar_fwd(a, b, bias, allow_tf32)
        ctx.save_for_backward(a, b, out)
        ctx.bias_shape = tuple(bias.shape)
        ctx.allow_tf32 = allow_tf32
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        ga, gb, gbias = _mar_bwd(grad, a, b, out, ctx.bias_shape, ctx.needs_input_grad[:3],
                                 ctx.allow_tf32)
        return ga, gb, gbias, None


class AddMulActivation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, bias, multiplier=1.0, activation="relu"):
        act = activation if type(activation) is int else _core._act(activation)
        m = float(multiplier)
        out = _amc_fwd(x, y, bias, m, act)
        ok = act in _OUT_FORM and _out_form_cache.get((x.is_cuda, x.dtype))
        if ok is None:
            ok = _amc_out_ok(x)
        if ok:
            # only `out`: autograd's version counter still catches an in-place change of it.
            # The shapes of the gradients autograd wants (reading a shape costs ~0.2 us).
            n = ctx.needs_input_grad
            ctx.save_for_backward(out)
            ctx.args = (m, act, (x.shape if n[0] else None, y.shape if n[1] else None,
                                 bias.shape if n[2] else None))
        else:
            ctx.save_for_backward(x, y, bias)
            ctx.args = (m, act, None)
        return out

    @staticmethod
    def backward(ctx, grad):
        m, act, shapes = ctx.args
        if shapes is not None:
            (out,) = ctx.saved_tensors
            gx, gy, gb = _amc_bwd_out(grad, out, m, act, shapes, ctx.needs_input_grad[:3])
        else:
            x, y, bias = ctx.saved_tensors
            gx, gy, gb = _amc_bwd(grad, x, y, bias, m, act, ctx.needs_input_grad[:3])
        return gx, gy, gb, None, None


class MatmulAddActivation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, bias, activation="relu", allow_tf32=False):
        act = _act(activation)
        if act in _OUT_FORM:
            out = _maa_fwd(a, b, bias, act, False, allow_tf32)
            ctx.save_for_backward(a, b, out)
            ctx.saved_is_pre = False
        else:
            out, pre = _maa_fwd(a, b, bias, act, True, allow_tf32)
            ctx.save_for_backward(a, b, pre)
            ctx.saved_is_pre = True
        ctx.activation, ctx.bias_shape, ctx.allow_tf32 = act, tuple(bias.shape), allow_tf32
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, saved = ctx.saved_tensors
        ga, gb, gbias = _maa_bwd(grad, a, b, saved, ctx.activation, ctx.saved_is_pre,
                                 ctx.bias_shape, ctx.needs_input_grad[:3], ctx.allow_tf32)
        return ga, gb, gbias, None, None


class MatmulAddResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, bias, residual, allow_tf32=False):
        ctx.save_for_backward(a, b)
        ctx.bias_shape, ctx.residual_shape = tuple(bias.shape), tuple(residual.shape)
        ctx.allow_tf32 = allow_tf32
        return _mres_fwd(a, b, bias, residual, allow_tf32)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (*_mres_bwd(grad, a, b, ctx.bias_shape, ctx.residual_shape,
                           ctx.needs_input_grad[:4], ctx.allow_tf32), None)


# Function.apply's Python layer (argument binding, functorch unwrapping) costs more than the
# kernel call on small tensors; where no functorch transform is active (checked per call)
# torch's C apply does the same work.
_mar_apply = super(torch.autograd.Function, MatmulAddRelu).apply
_amc_apply = super(torch.autograd.Function, AddMulActivation).apply
_maa_apply = super(torch.autograd.Function, MatmulAddActivation).apply
_mres_apply = super(torch.autograd.Function, MatmulAddResidual).apply
# nn.Parameter counts as plain: it disables __torch_function__ and is what every layer's
# weight and bias are (without it a training step never took the fast path).
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_compiling = torch.compiler.is_compiling
_grad_on = torch.is_grad_enabled
_functorch_on = torch._C._are_functorch_transforms_active
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled


def _eager(a, b, c):
    """Plain tensors in plain eager mode: nothing needs the dispatcher's custom op."""
    return (type(a) in _PLAIN and type(b) in _PLAIN and type(c) in _PLAIN and not _functorch_on()
            and not _dispatch_modes() and not _function_modes())


def _eager4(a, b, c, d):
    return type(d) in _PLAIN and _eager(a, b, c)


# ---- the public functions ------------------------------------------------------------------
#
# Plain tensors in eager mode: without grad the extension is called directly (the fastest
# path); with grad, the C++ operator (one dispatcher call, autograd in C++) where loaded,
# else the Python autograd Function. Anything else (torch.compile, subclasses, modes,
# functorch) goes to torch.ops.dlfuse.*. A C++ operator's error comes back as the dlfuse
# exception the Python path raises.

_ops = torch.ops.dlfuse
_reraise = _torch_cpp.reraise
_ERRS = (RuntimeError, ValueError, NotImplementedError)


def matmul_add_relu(a, b, bias, allow_tf32=False):
    """relu(a @ b + bias), differentiable in a, b and bias; works under torch.compile."""
    if not _compiling() and _eager(a, b, bias):
        if _grad_on() and (a.requires_grad or b.requires_grad or bias.requires_grad):
            if not CPP_OPS:
                return _mar_apply(a, b, bias, bool(allow_tf32))
            try:
                return _ops.matmul_add_relu.default(*_c(a, b, bias), bool(allow_tf32))
            except _ERRS as e:
                _reraise(e)
        return _mar_fwd(a, b, bias, bool(allow_tf32))
    return _ops.matmul_add_relu(a, b, bias, bool(allow_tf32))


def add_mul_activation(x, y, bias, multiplier=1.0, activation="relu"):
    """act(x + bias + multiplier * y), differentiable in x, y and bias. For identity, relu,
    sigmoid and tanh the backward reads the output (saved instead of x, y, bias) where the
    kernel serving the backward takes it."""
    act = activation if type(activation) is int else _core._act(activation)
    if not _compiling() and _eager(x, y, bias):
        if _grad_on() and (x.requires_grad or y.requires_grad or bias.requires_grad):
            if not CPP_OPS:
                return _amc_apply(x, y, bias, float(multiplier), act)
            try:
                return _ops.add_mul_activation.default(*_c(x, y, bias), float(multiplier), act)
            except _ERRS as e:
                _reraise(e)
        return _amc_fwd(x, y, bias, float(multiplier), act)
    return _ops.add_mul_activation(x, y, bias, float(multiplier), act)


def matmul_add_activation(a, b, bias, activation="relu", allow_tf32=False):
    """act(a @ b + bias), differentiable in a, b and bias; works under torch.compile. The
    backward reads out (identity, relu, sigmoid, tanh) or pre = a @ b + bias (gelu, silu),
    which the forward then also writes."""
    act = activation if type(activation) is int else _core._act(activation)
    if not _compiling() and _eager(a, b, bias):
        if _grad_on() and (a.requires_grad or b.requires_grad or bias.requires_grad):
            if not CPP_OPS:
                return _maa_apply(a, b, bias, act, bool(allow_tf32))
            try:
                return _ops.matmul_add_activation.default(*_c(a, b, bias), act, act not in _OUT_FORM,
                                                          bool(allow_tf32))[0]
            except _ERRS as e:
                _reraise(e)
        return _maa_fwd(a, b, bias, act, False, bool(allow_tf32))
    # pre only where a backward may read it (whether it will is not known under functorch)
    return _ops.matmul_add_activation(a, b, bias, act, act not in _OUT_FORM and _grad_on(),
                                      bool(allow_tf32))[0]


def matmul_add_residual(a, b, bias, residual, allow_tf32=False):
    """a @ b + bias + residual, differentiable in all four; works under torch.compile."""
    if not _compiling() and _eager4(a, b, bias, residual):
        if _grad_on() and (a.requires_grad or b.requires_grad or bias.requires_grad
                           or residual.requires_grad):
            if not CPP_OPS:
                return _mres_apply(a, b, bias, residual, bool(allow_tf32))
            try:
                return _ops.matmul_add_residual.default(*_c(a, b, bias, residual), bool(allow_tf32))
            except _ERRS as e:
                _reraise(e)
        return _mres_fwd(a, b, bias, residual, bool(allow_tf32))
    return _ops.matmul_add_residual(a, b, bias, residual, bool(allow_tf32))


class FusedLinearReLU(torch.nn.Linear):
    """nn.Linear followed by ReLU, as one dlfuse matmul_add_relu (x @ W^T + b; W^T is a
    strided view, which the plugins take as is)."""

    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)

    def forward(self, x):
        return matmul_add_relu(x, self.weight.t(), self.bias)


class FusedLinear(torch.nn.Linear):
    """nn.Linear followed by an activation (a name or dlfuse_activation_t integer, see
    matmul_add_activation), as one dlfuse matmul_add_activation."""

    def __init__(self, in_features, out_features, activation="relu", device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)
        self.activation = _act(activation)

    def forward(self, x):
        return matmul_add_activation(x, self.weight.t(), self.bias, self.activation)

    def extra_repr(self):
        return f"{super().extra_repr()}, activation={self.activation}"


_MLP_OP = None  # torch.ops.dlfuse.mlp, derived once, by the first FusedMLP made (deriving locks,
                # which torch.compile cannot trace)


def _mlp_op():
    global _MLP_OP
    if _MLP_OP is None:
        _MLP_OP = op_function("mlp")
    return _MLP_OP


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
        self.activation, self.output_activation = _act(activation), _act(output_activation)
        for name, a in (("activation", self.activation), ("output_activation", self.output_activation)):
            if a not in _OUT_FORM:
                raise ValueError(f"FusedMLP: {name} is {a}; expected identity, relu, sigmoid or tanh (the "
                                 f"backward takes each derivative from the layer's output)")
        self.allow_tf32 = bool(allow_tf32)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o, device=device, dtype=dtype)
                                          for i, o in zip(sizes[:-1], sizes[1:]))
        _mlp_op()

    def forward(self, x):
        if x.dim() < 1 or x.shape[-1] != self.layers[0].in_features:
            raise ValueError(f"FusedMLP: x has shape {tuple(x.shape)}; expected [..., "
                             f"{self.layers[0].in_features}]")
        rows = x.reshape(-1, x.shape[-1])
        pad = [None] * (7 - len(self.layers))
        op = _MLP_OP or _mlp_op()  # a module unpickled in a new process derives it here
        out = op(rows, *(l.weight.t() for l in self.layers), *pad, *(l.bias for l in self.layers), *pad,
                 self.activation, self.output_activation, int(self.allow_tf32))[0]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def extra_repr(self):
        return (f"sizes={[self.layers[0].in_features] + [l.out_features for l in self.layers]}, "
                f"activation={self.activation}, output_activation={self.output_activation}")


# ---- every other op, from its schema ---------------------------------------------------------
#
# An op this module has no function for above (a plugin's own, or one added to ops.def) gets
# a torch custom op torch.ops.dlfuse.<op> whose schema, kernel, fake kernel and autograd are
# all derived from its dlfuse schema (dlfuse._ext.schema):
#   - torch schema: its inputs (Tensor, Tensor? where optional), its attributes (float or int,
#     with their defaults), then `bool[] needs=[]` when every output is optional (empty: all)
#     and `int[]? <x>_shape=None` for each REDUCIBLE output grad_<x>; it returns every output
#     (an output not computed is an empty tensor, as custom ops must return tensors);
#   - kernel and fake kernel: the output shapes from dlfuse_op_infer_outputs (dlfuse._ext.infer,
#     which reads shapes only, so fake tensors do), outputs from torch.empty, the call through
#     dlfuse._ext.call;
#   - autograd, where the registry also has `<op>_backward`: the backward's inputs named like
#     the forward's inputs or outputs are saved (grad_out is the gradient of the first output,
#     the only differentiable one), its attributes taken from the forward's of the same name,
#     `needs` from which inputs need a gradient and `<x>_shape` from the forward's tensor x;
#     its output grad_<x> is the gradient of input x.
# With the C++ operators loaded (CPP_OPS), the kernel and autograd are C++ by the same rules
# (csrc/torch_derived.cpp reads the arguments by their names in this torch schema); the fake
# kernel stays here. dlfuse.torch.<op> (or op_function(name)) calls torch.ops.dlfuse.<op> and
# raises dlfuse's exceptions (InvalidArgumentError, ...) for its errors.

_DERIVED_LIB = None
_derived = {}  # op name -> (_Derived, its torch op, dlfuse.torch.<name>)
_TORCH_DTYPE_DL = {torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16),
                   torch.bfloat16: (4, 16)}
_OPTIONAL, _REDUCIBLE = 1, 2


class _Derived:
    """What the derived torch op of one dlfuse op needs to know, from its schema."""

    def __init__(self, name):
        self.name = name
        self.inputs, self.outputs, self.attrs = _core._ext.schema(name, None)
        self.in_names = [n for n, _f, _s in self.inputs]
        self.out_names = [n for n, *_ in self.outputs]
        self.attr_names = [n for n, *_ in self.attrs]
        self.all_optional = all(f & _OPTIONAL for _n, f, *_ in self.outputs)
        self.shape_params = [(i, (n[5:] if n.startswith("grad_") else n) + "_shape")
                             for i, (n, f, *_) in enumerate(self.outputs) if f & _REDUCIBLE]

    def torch_schema(self):
        args = [f"Tensor{'?' if f & _OPTIONAL else ''} {n}" for n, f, _s in self.inputs]
        for n, is_float, required, default, _key in self.attrs:
            t = "float" if is_float else "int"
            args.append(f"{t} {n}" if required else f"{t} {n}={default!r}")
        if self.all_optional:
            args.append("bool[] needs=[]")
        args += [f"int[]? {p}=None" for _i, p in self.shape_params]
        ret = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")"
        return f"({', '.join(args)}) -> {ret}"

    def split(self, args):
        """(inputs, {attr: value}, needs, {output index: shape}) from the torch op's arguments."""
        n_in, n_at = len(self.inputs), len(self.attrs)
        ins, rest = list(args[:n_in]), list(args[n_in:])
        attrs = dict(zip(self.attr_names, rest[:n_at]))
        rest = rest[n_at:]
        needs = [True] * len(self.outputs)
        if self.all_optional:
            given = list(rest.pop(0)) if rest else []
            if given:
                needs = [bool(v) for v in given]
        shapes = {i: rest[k] for k, (i, _p) in enumerate(self.shape_params) if k < len(rest) and rest[k] is not None}
        return ins, attrs, needs, shapes

    def empty_outputs(self, ins, attrs, needs, shapes):
        like = next(t for t in ins if t is not None)
        code, bits = _TORCH_DTYPE_DL.get(like.dtype, (0, 0))
        inferred = _core._ext.infer(self.name, [None if t is None else tuple(t.shape) for t in ins],
                                    code, bits, attrs, None)
        return [like.new_empty(tuple(shapes.get(i, inferred[i])) if needs[i] else (0,))
                for i in range(len(self.outputs))]

    def kernel(self, *args):
        ins, attrs, needs, shapes = self.split(args)
        ins = list(_c(*ins)) if FORCE_CONTIGUOUS else ins
        outs = self.empty_outputs(ins, attrs, needs, shapes)
        like = next(t for t in ins if t is not None)
        _core._ext.call(self.name, tuple(ins), attrs,
                        [o if n else False for o, n in zip(outs, needs)], _stream(like), None)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(self, *args):
        ins, attrs, needs, shapes = self.split(args)
        outs = self.empty_outputs(ins, attrs, needs, shapes)
        return outs[0] if len(outs) == 1 else tuple(outs)


def _derive(name):
    """Defines torch.ops.dlfuse.<name> from the op's schema; returns it."""
    global _DERIVED_LIB
    d = _Derived(name)
    if _DERIVED_LIB is None:
        _DERIVED_LIB = torch.library.Library("dlfuse", "FRAGMENT")
    qual = "dlfuse::" + name
    bwd_name = name + "_backward"
    backward = bwd_name if bwd_name in _core.op_names() else None
    if backward is not None:
        op_function(backward)
    if CPP_OPS:  # kernel and autograd in C++ (csrc/torch_derived.cpp), by the same schema
        _torch_cpp.derive(name, d.torch_schema(), backward)
    else:
        _DERIVED_LIB.define(name + d.torch_schema())
        torch.library.impl(qual, ("CPU", "CUDA"), lib=_DERIVED_LIB)(d.kernel)
        if backward is not None:
            _register_derived_autograd(qual, d, _derived[backward][0], _derived[backward][1])
    torch.library.register_fake(qual, lib=_DERIVED_LIB)(d.fake)
    op = getattr(torch.ops.dlfuse, name)
    _derived[name] = (d, op, _with_dlfuse_errors(op))
    return _derived[name][2]


def _with_dlfuse_errors(op):
    """op as dlfuse.torch.<name>: a C++ operator's error comes back as the dlfuse exception
    the Python operators raise (InvalidArgumentError, ...)."""
    def call(*args, **kwargs):
        try:
            return op(*args, **kwargs)
        except _ERRS as e:
            _reraise(e)
    call.__name__ = call.__qualname__ = op._qualified_op_name.split("::")[-1]
    call.__doc__ = f"dlfuse op {call.__name__}: torch.ops.{op._qualified_op_name.replace('::', '.')} " \
                   f"with dlfuse's exceptions; schema {op.default._schema}"
    call.op = op
    return call


def _register_derived_autograd(qual, d, b, bwd_op):
    """The Python form of csrc/torch_derived.cpp's autograd (where the C++ operators are not
    loaded): the rules above; only the first output is differentiable."""
    grad_of = [n[5:] if n.startswith("grad_") else n for n in b.out_names]
    n_extra = len(d.attrs) + (1 if d.all_optional else 0) + len(d.shape_params)

    def setup_context(ctx, inputs, output):
        # Only the first output's gradient is read: no zeros made for the others.
        ctx.set_materialize_grads(False)
        outs = output if isinstance(output, tuple) else (output,)
        ctx.mark_non_differentiable(*outs[1:])
        by_name = dict(zip(d.in_names, inputs[:len(d.in_names)]))
        by_name.update(zip(d.out_names, outs))
        ctx.save_for_backward(*(by_name.get(n) for n in b.in_names[1:]))
        attrs = dict(zip(d.attr_names, inputs[len(d.in_names):len(d.in_names) + len(d.attrs)]))
        ctx.attrs = [attrs.get(n, default) for n, _f, _r, default, _key in b.attrs]
        ctx.shapes = [None if by_name.get(p[:-6]) is None else list(by_name[p[:-6]].shape)
                      for _i, p in b.shape_params]

    def backward(ctx, *grads):
        if grads[0] is None:  # the first output took no part in what is differentiated
            return (None,) * (len(d.in_names) + n_extra)
        needs_in = dict(zip(d.in_names, ctx.needs_input_grad))
        needs = [bool(needs_in.get(n, False)) for n in grad_of]
        res = bwd_op(grads[0], *ctx.saved_tensors, *ctx.attrs,
                     *([needs] if b.all_optional else []), *ctx.shapes)
        res = res if isinstance(res, tuple) else (res,)
        by_input = {n: (r if k else None) for n, r, k in zip(grad_of, res, needs)}
        return tuple(by_input.get(n) for n in d.in_names) + (None,) * n_extra

    torch.library.register_autograd(qual, backward, setup_context=setup_context, lib=_DERIVED_LIB)


def op_function(name):
    """The torch function of dlfuse op `name`: the public function above for the ops this
    module defines by hand, else torch.ops.dlfuse.<name> derived from its schema (its
    backward op, where the registry has one, wired as its autograd formula)."""
    if name in __all__:
        return globals()[name]
    got = _derived.get(name)
    if got is not None:
        return got[2]
    if name in _HAND_OPS:
        return getattr(torch.ops.dlfuse, name)  # defined above or by the C++ operators
    with _derive_lock:  # an op is defined once, whichever thread asks first
        got = _derived.get(name)
        return got[2] if got is not None else _derive(name)


_derive_lock = threading.RLock()  # re-entered: deriving an op derives its backward


# The torch.ops.dlfuse.* that this module (or csrc/torch_ops.cpp) defines by hand, with the
# documented signatures (docs/python.md) that predate op schemas.
_HAND_OPS = frozenset(_FAKES)


def __getattr__(name):
    """dlfuse.torch.<op> for an op a loaded plugin declares (derived from its schema)."""
    if not name.startswith("_"):
        try:
            if name in _core.op_names():
                return op_function(name)
        except (_core.Error, OSError):
            pass
    raise AttributeError(f"module 'dlfuse.torch' has no attribute {name!r}")
