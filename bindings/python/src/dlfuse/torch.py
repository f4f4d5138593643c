"""PyTorch integration: differentiable ops that are fast in eager and traceable by
torch.compile.

    import dlfuse.torch as dft
    y = dft.matmul_add_relu(x, w, b)              # differentiable, torch.compile-able
    z = dft.add_mul_activation(x, y, b, 0.5, "silu")

In eager mode on plain tensors the public functions call the compiled extension directly
(no grad needed) or through an autograd Function whose apply goes straight to torch's C
implementation; outputs and gradients are allocated by torch's own allocator through its
DLPack exchange API, and every call runs on torch's current CUDA stream. Under
torch.compile, tensor subclasses, dispatch or torch-function modes and functorch
transforms they dispatch to the torch.library custom ops ``torch.ops.dlfuse.*`` (fake
kernels and autograd formulas registered), so ``torch.compile(fullgraph=True)`` traces
them as opaque calls and CUDA graphs capture them (docs/python.md).
"""

from typing import List, Tuple

import torch

from . import _core, _ext

__all__ = ["matmul_add_relu", "add_mul_activation", "MatmulAddRelu", "AddMulActivation",
           "FusedLinearReLU"]


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


# ---- eager kernels (the extension; outputs allocated by torch) ------------------------------

def _mar_fwd(a, b, bias, allow_tf32):
    if FORCE_CONTIGUOUS:
        a, b, bias = _c(a, b, bias)
    return _ext.matmul_add_relu(a, b, bias, None, _stream(a), allow_tf32=allow_tf32)


def _mar_bwd(grad_out, a, b, out, bias_shape, needs, allow_tf32):
    if FORCE_CONTIGUOUS:
        grad_out, a, b, out = _c(grad_out, a, b, out)
    return _ext.matmul_add_relu_backward(grad_out, a, b, out, bias_shape=bias_shape, needs=needs,
                                         stream=_stream(a), allow_tf32=allow_tf32)


def _amc_fwd(x, y, bias, multiplier, activation):
    if FORCE_CONTIGUOUS:
        x, y, bias = _c(x, y, bias)
    return _ext.add_mul_activation(x, y, bias, multiplier, activation, None, _stream(x))


def _amc_bwd(grad_out, x, y, bias, multiplier, activation, needs):
    if FORCE_CONTIGUOUS:
        grad_out, x, y, bias = _c(grad_out, x, y, bias)
    return _ext.add_mul_activation_backward(grad_out, x, y, bias, multiplier, activation,
                                            needs=needs, stream=_stream(x))


# ---- torch.library custom ops --------------------------------------------------------------

@torch.library.custom_op("dlfuse::matmul_add_relu", mutates_args=())
def _op_mar(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
            allow_tf32: bool = False) -> torch.Tensor:
    # Under torch.compile the outputs must come from torch.empty: CUDA-graph trees
    # (mode="reduce-overhead") free them through the caching allocator's own deleter.
    a, b, bias = _c(a, b, bias)
    return _ext.matmul_add_relu(a, b, bias, a.new_empty(_mm_shape(a, b)), _stream(a),
                                allow_tf32=allow_tf32)


@_op_mar.register_fake
def _(a, b, bias, allow_tf32=False):
    return a.new_empty(_mm_shape(a, b))


@torch.library.custom_op("dlfuse::matmul_add_relu_backward", mutates_args=())
def _op_mar_bwd(grad_out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                bias_shape: List[int], needs_a: bool, needs_b: bool, needs_bias: bool,
                allow_tf32: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_out, a, b, out = _c(grad_out, a, b, out)
    # custom ops return tensors: an unwanted gradient is an empty one (allocated by torch,
    # as in _op_mar)
    ga, gb, gbias = (a.new_empty(a.shape if needs_a else (0,)), a.new_empty(b.shape if needs_b else (0,)),
                     a.new_empty(tuple(bias_shape) if needs_bias else (0,)))
    _ext.matmul_add_relu_backward(grad_out, a, b, out, bias_shape=tuple(bias_shape),
                                  needs=(needs_a, needs_b, needs_bias), grad_a=ga if needs_a else None,
                                  grad_b=gb if needs_b else None, grad_bias=gbias if needs_bias else None,
                                  stream=_stream(a), allow_tf32=allow_tf32)
    return ga, gb, gbias


@_op_mar_bwd.register_fake
def _(grad_out, a, b, out, bias_shape, needs_a, needs_b, needs_bias, allow_tf32=False):
    return (a.new_empty(a.shape if needs_a else (0,)), a.new_empty(b.shape if needs_b else (0,)),
            a.new_empty(tuple(bias_shape) if needs_bias else (0,)))


def _mar_setup(ctx, inputs, output):
    a, b, bias, allow_tf32 = inputs
    ctx.save_for_backward(a, b, output)
    ctx.bias_shape = list(bias.shape)
    ctx.allow_tf32 = allow_tf32


def _mar_backward(ctx, grad):
    a, b, out = ctx.saved_tensors
    na, nb, nbias = ctx.needs_input_grad[:3]
    ga, gb, gbias = torch.ops.dlfuse.matmul_add_relu_backward(
        grad, a, b, out, ctx.bias_shape, na, nb, nbias, ctx.allow_tf32)
    return (ga if na else None, gb if nb else None, gbias if nbias else None, None)


_op_mar.register_autograd(_mar_backward, setup_context=_mar_setup)


@torch.library.custom_op("dlfuse::add_mul_activation", mutates_args=())
def _op_amc(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, multiplier: float = 1.0,
            activation: int = 1) -> torch.Tensor:
    x, y, bias = _c(x, y, bias)  # outputs from torch.empty, as in _op_mar
    out = x.new_empty(torch.broadcast_shapes(x.shape, y.shape, bias.shape))
    return _ext.add_mul_activation(x, y, bias, multiplier, activation, out, _stream(x))


@_op_amc.register_fake
def _(x, y, bias, multiplier=1.0, activation=1):
    return x.new_empty(torch.broadcast_shapes(x.shape, y.shape, bias.shape))


@torch.library.custom_op("dlfuse::add_mul_activation_backward", mutates_args=())
def _op_amc_bwd(grad_out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor,
                multiplier: float, activation: int, needs_x: bool, needs_y: bool,
                needs_bias: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_out, x, y, bias = _c(grad_out, x, y, bias)  # outputs from torch.empty, as in _op_mar
    gx, gy, gb = (x.new_empty(x.shape if needs_x else (0,)), x.new_empty(y.shape if needs_y else (0,)),
                  x.new_empty(bias.shape if needs_bias else (0,)))
    _ext.add_mul_activation_backward(grad_out, x, y, bias, multiplier, activation,
                                     needs=(needs_x, needs_y, needs_bias), grad_x=gx if needs_x else None,
                                     grad_y=gy if needs_y else None, grad_bias=gb if needs_bias else None,
                                     stream=_stream(x))
    return gx, gy, gb


@_op_amc_bwd.register_fake
def _(grad_out, x, y, bias, multiplier, activation, needs_x, needs_y, needs_bias):
    return (x.new_empty(x.shape if needs_x else (0,)), x.new_empty(y.shape if needs_y else (0,)),
            x.new_empty(bias.shape if needs_bias else (0,)))


def _amc_setup(ctx, inputs, output):
    x, y, bias, multiplier, activation = inputs
    ctx.save_for_backward(x, y, bias)
    ctx.multiplier = multiplier
    ctx.activation = activation


def _amc_backward(ctx, grad):
    x, y, bias = ctx.saved_tensors
    nx, ny, nb = ctx.needs_input_grad[:3]
    gx, gy, gb = torch.ops.dlfuse.add_mul_activation_backward(
        grad, x, y, bias, ctx.multiplier, ctx.activation, nx, ny, nb)
    return (gx if nx else None, gy if ny else None, gb if nb else None, None, None)


_op_amc.register_autograd(_amc_backward, setup_context=_amc_setup)


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
        ctx.save_for_backward(x, y, bias)
        ctx.multiplier, ctx.activation = float(multiplier), act
        return _amc_fwd(x, y, bias, float(multiplier), act)

    @staticmethod
    def backward(ctx, grad):
        x, y, bias = ctx.saved_tensors
        gx, gy, gb = _amc_bwd(grad, x, y, bias, ctx.multiplier, ctx.activation,
                              ctx.needs_input_grad[:3])
        return gx, gy, gb, None, None


# Function.apply's Python layer (argument binding, functorch unwrapping) costs more than the
# kernel call on small tensors; where no functorch transform is active (checked per call)
# torch's C apply does the same work.
_mar_apply = super(torch.autograd.Function, MatmulAddRelu).apply
_amc_apply = super(torch.autograd.Function, AddMulActivation).apply
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


# ---- the public functions ------------------------------------------------------------------

def matmul_add_relu(a, b, bias, allow_tf32=False):
    """relu(a @ b + bias), differentiable in a, b and bias; works under torch.compile."""
    if not _compiling() and _eager(a, b, bias):
        if _grad_on() and (a.requires_grad or b.requires_grad or bias.requires_grad):
            return _mar_apply(a, b, bias, bool(allow_tf32))
        return _mar_fwd(a, b, bias, bool(allow_tf32))
    return torch.ops.dlfuse.matmul_add_relu(a, b, bias, bool(allow_tf32))


def add_mul_activation(x, y, bias, multiplier=1.0, activation="relu"):
    """act(x + bias + multiplier * y), differentiable in x, y and bias."""
    act = activation if type(activation) is int else _core._act(activation)
    if not _compiling() and _eager(x, y, bias):
        if _grad_on() and (x.requires_grad or y.requires_grad or bias.requires_grad):
            return _amc_apply(x, y, bias, float(multiplier), act)
        return _amc_fwd(x, y, bias, float(multiplier), act)
    return torch.ops.dlfuse.add_mul_activation(x, y, bias, float(multiplier), act)


class FusedLinearReLU(torch.nn.Linear):
    """nn.Linear followed by ReLU, as one dlfuse matmul_add_relu (x @ W^T + b; W^T is a
    strided view, which the plugins take as is)."""

    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)

    def forward(self, x):
        return matmul_add_relu(x, self.weight.t(), self.bias)
