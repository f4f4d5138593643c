"""JAX integration: dlfuse's ops as differentiable functions usable inside ``jax.jit``,
``jax.grad`` and ``jax.vmap``, on CPU and CUDA (docs/jax.md).

    import jax, dlfuse.jax as djx
    y = djx.matmul_add_relu(x, w, b)                  # relu(x @ w + b)
    z = djx.add_mul_activation(x, y, b, 0.5, "silu")  # silu(x + b + 0.5 * y)
    h = djx.matmul_add_activation(x, w, b, "gelu_tanh")
    r = djx.matmul_add_residual(h, w2, b2, x)         # h @ w2 + b2 + x

Each call is one XLA custom call (the FFI target ``dlfuse_call``, csrc/jax_ffi.cpp) that runs
the libdlfuse op on XLA's buffers: on CPU through the preferred CPU plugin, on CUDA on XLA's
stream. Gradients come from the ops' backward kernels (jax.custom_vjp), computing only the
gradients JAX asks for; vmap maps to the ops' own batch broadcasting.

Every other op of the default registry (a plugin's own, a backward) is ``dlfuse.jax.<op>``
(or ``op_function(name)``), derived from its schema: see ``op_function``.
"""
import functools

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from . import _core, _ext
from . import _jax_ffi as _ffi

__all__ = ["matmul_add_relu", "add_mul_activation", "matmul_add_activation",
           "matmul_add_residual", "op_function"]

_ffi.load()

_ACT, _MUL, _TF32 = _ext.ATTR_ACTIVATION, _ext.ATTR_MULTIPLIER, _ext.ATTR_ALLOW_TF32
# identity, relu, sigmoid, tanh: act' is a function of act's output, so the backward reads
# `out` instead of the forward's inputs or `pre`.
_OUT_FORM = frozenset((0, 1, 2, 3))


def _act(activation):
    """An activation name or dlfuse_activation_t integer, checked at trace time."""
    act = _core._act(activation)
    if not 0 <= act < _ext.ACT_COUNT:
        raise ValueError(f"dlfuse: activation must be one of {sorted(_ext.ACTIVATIONS)} or "
                         f"0..{_ext.ACT_COUNT - 1}, got {activation!r}")
    return act


def _platform():
    return "cuda" if jax.default_backend() in ("gpu", "cuda") else "cpu"


# ---- rank padding: what makes vmap the ops' own batch broadcasting -------------------------
#
# Every operand is reshaped to the output's rank (leading 1s, free in XLA) before the call, so
# that vmap's batch dim goes in front of every operand, where the ops broadcast it as a batch
# dim (the batching rule: _jax_ffi._batchable).

def _pad(x, rank):
    return x if x.ndim == rank else jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def _pad_shape(shape, rank):
    return (1,) * (rank - len(shape)) + tuple(shape)


def _run(op, inputs, wanted, rank, attrs, shapes=None, backward=False):
    """call() on operands padded to `rank`; results reshaped back to their own shapes."""
    given = {n: x for n, x in inputs.items() if x is not None}
    real = _ffi.output_shapes_of(op, given, wanted, attrs, shapes)  # checks the caller's shapes
    padded = {n: _pad(x, rank) for n, x in given.items()}
    pshapes = {n: _pad_shape(s, rank) for n, s in (shapes or {}).items()}
    res = _ffi.call(op, padded, wanted, attrs, pshapes, backward)
    return [r if r.shape == s else jnp.reshape(r, s) for r, s in zip(res, real)]


def _grads(op, ct, inputs, names, perturbed, rank, attrs, shapes):
    """The backward op's gradients of `names` where perturbed; None (zero) elsewhere."""
    if isinstance(ct, SymbolicZero) or not any(perturbed):
        return (None,) * len(names)
    wanted = tuple(n for n, p in zip(names, perturbed) if p)
    res = iter(_run(op, {"grad_out": ct, **inputs}, wanted, rank, attrs, shapes, backward=True))
    return tuple(next(res) if p else None for p in perturbed)


_MM_GRADS = ("grad_a", "grad_b", "grad_bias")


# ---- matmul_add_relu ---------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _mar(a, b, bias, allow_tf32):
    return _run("matmul_add_relu", dict(a=a, b=b, bias=bias), ("out",), _rank_mm(a, b),
                {_TF32: allow_tf32})[0]


def _mar_fwd(a, b, bias, allow_tf32):
    out = _mar(a.value, b.value, bias.value, allow_tf32)
    perturbed = (a.perturbed, b.perturbed, bias.perturbed)
    return out, (a.value, b.value, out, bias.value.shape, perturbed)


def _mar_bwd(allow_tf32, saved, ct):
    a, b, out, bias_shape, perturbed = saved
    return _grads("matmul_add_relu_backward", ct, dict(a=a, b=b, out=out), _MM_GRADS, perturbed,
                  out.ndim, {_TF32: allow_tf32}, {"bias": bias_shape})


_mar.defvjp(_mar_fwd, _mar_bwd, symbolic_zeros=True)


def _rank_mm(a, b):
    return max(a.ndim, b.ndim, 2)


def matmul_add_relu(a, b, bias, allow_tf32=False):
    """relu(a @ b + bias): a [..., M, K], b [..., K, N], bias broadcastable to the output
    [batch..., M, N]. Differentiable in a, b and bias; the backward reads a, b and out."""
    return _mar(a, b, bias, int(bool(allow_tf32)))


# ---- add_mul_activation -------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _ama(x, y, bias, multiplier, act):
    rank = max(x.ndim, y.ndim, bias.ndim)
    return _run("add_mul_activation", dict(x=x, y=y, bias=bias), ("out",), rank,
                {_ACT: act, _MUL: multiplier})[0]


def _ama_fwd(x, y, bias, multiplier, act):
    out = _ama(x.value, y.value, bias.value, multiplier, act)
    perturbed = (x.perturbed, y.perturbed, bias.perturbed)
    shapes = {"x": x.value.shape, "y": y.value.shape, "bias": bias.value.shape}
    if act in _OUT_FORM and _core.kernel_takes_out_form(_platform(), out.dtype):
        return out, ({"out": out}, shapes, out.ndim, perturbed)
    return out, ({"x": x.value, "y": y.value, "bias": bias.value}, shapes, out.ndim, perturbed)


def _ama_bwd(multiplier, act, saved, ct):
    inputs, shapes, rank, perturbed = saved
    return _grads("add_mul_activation_backward", ct, inputs, ("grad_x", "grad_y", "grad_bias"),
                  perturbed, rank, {_ACT: act, _MUL: multiplier}, shapes)


_ama.defvjp(_ama_fwd, _ama_bwd, symbolic_zeros=True)


def add_mul_activation(x, y, bias, multiplier=1.0, activation="relu"):
    """act(x + bias + multiplier * y), NumPy broadcasting. Differentiable in x, y and bias.
    For identity, relu, sigmoid and tanh the backward reads the output (saved instead of x, y
    and bias) where the kernel serving the backward takes it; gelu and silu read x, y, bias."""
    return _ama(x, y, bias, float(multiplier), _act(activation))


# ---- matmul_add_activation ----------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _maa(a, b, bias, act, allow_tf32):
    return _run("matmul_add_activation", dict(a=a, b=b, bias=bias), ("out",), _rank_mm(a, b),
                {_ACT: act, _TF32: allow_tf32})[0]


def _maa_fwd(a, b, bias, act, allow_tf32):
    av, bv, biasv = a.value, b.value, bias.value
    perturbed = (a.perturbed, b.perturbed, bias.perturbed)
    if act in _OUT_FORM:
        out = _maa(av, bv, biasv, act, allow_tf32)
        saved = {"out": out}
    else:  # gelu, silu: the backward needs pre = a @ b + bias, which the forward also writes
        out, pre = _run("matmul_add_activation", dict(a=av, b=bv, bias=biasv), ("out", "pre"),
                        _rank_mm(av, bv), {_ACT: act, _TF32: allow_tf32})
        saved = {"pre": pre}
    return out, (av, bv, saved, biasv.shape, perturbed)


def _maa_bwd(act, allow_tf32, saved, ct):
    a, b, out_or_pre, bias_shape, perturbed = saved
    rank = next(iter(out_or_pre.values())).ndim
    return _grads("matmul_add_activation_backward", ct, dict(a=a, b=b, **out_or_pre), _MM_GRADS,
                  perturbed, rank, {_ACT: act, _TF32: allow_tf32}, {"bias": bias_shape})


_maa.defvjp(_maa_fwd, _maa_bwd, symbolic_zeros=True)


def matmul_add_activation(a, b, bias, activation="relu", allow_tf32=False):
    """act(a @ b + bias), shapes as matmul_add_relu. Differentiable in a, b and bias; the
    backward reads a, b and out (identity, relu, sigmoid, tanh) or pre = a @ b + bias (gelu,
    silu), which the forward then also writes."""
    return _maa(a, b, bias, _act(activation), int(bool(allow_tf32)))


# ---- matmul_add_residual ------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _mres(a, b, bias, residual, allow_tf32):
    return _run("matmul_add_residual", dict(a=a, b=b, bias=bias, residual=residual), ("out",),
                _rank_mm(a, b), {_TF32: allow_tf32})[0]


def _mres_fwd(a, b, bias, residual, allow_tf32):
    out = _mres(a.value, b.value, bias.value, residual.value, allow_tf32)
    perturbed = (a.perturbed, b.perturbed, bias.perturbed, residual.perturbed)
    shapes = {"bias": bias.value.shape, "residual": residual.value.shape}
    return out, (a.value, b.value, shapes, out.ndim, perturbed)


def _mres_bwd(allow_tf32, saved, ct):
    a, b, shapes, rank, perturbed = saved
    return _grads("matmul_add_residual_backward", ct, dict(a=a, b=b),
                  _MM_GRADS + ("grad_residual",), perturbed, rank, {_TF32: allow_tf32}, shapes)


_mres.defvjp(_mres_fwd, _mres_bwd, symbolic_zeros=True)


def matmul_add_residual(a, b, bias, residual, allow_tf32=False):
    """a @ b + bias + residual; bias and residual broadcast to the output. Differentiable in
    all four; the backward reads a and b only."""
    return _mres(a, b, bias, residual, int(bool(allow_tf32)))


# ---- every other op, from its schema --------------------------------------------------------

_derived = {}


def op_function(name):
    """dlfuse.jax's function of op `name`: the function above for the four forward ops, else
    one derived from the op's schema in the default registry (a plugin's own op, a backward):

        f(*inputs, **attrs) -> output, or a tuple of every output

    inputs positional in schema order (None for an absent optional one), attributes by name
    (case-insensitive; `activation` also by its name) with the schema's defaults; every
    output is computed, shaped by
    libdlfuse's inference. Usable under jit; vmap runs it one example at a time. Where the
    registry also has `<name>_backward` it is differentiable: the forward's inputs and
    outputs that the backward takes by name are saved, the backward's grad_out is the
    cotangent of the first output, its output grad_<x> is the gradient of input x (shaped
    like x), its attributes are the forward's of the same name."""
    if name in __all__ and name != "op_function":
        return globals()[name]
    f = _derived.get(name)
    if f is None:
        if name not in _core.op_names():
            raise AttributeError(f"dlfuse.jax: no op named {name!r} in the default registry "
                                 f"(dlfuse.op_names() lists them)")
        f = _derived[name] = _derive(name)
    return f


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return op_function(name)
    except AttributeError:
        raise AttributeError(f"module 'dlfuse.jax' has no attribute {name!r}") from None


def _bind(name, sc, args, kwargs):
    """(inputs tuple in schema order, ((attr key, value), ...)) from a derived call's arguments."""
    if len(args) > len(sc.inputs):
        raise TypeError(f"{name}() takes {len(sc.inputs)} inputs, got {len(args)} positional arguments")
    by_name = {a[0]: a for a in sc.attrs}
    ins = dict(zip(sc.inputs, args))
    attrs = {}
    for k, v in kwargs.items():
        key = k.lower()
        if key in ins:
            raise TypeError(f"{name}() got multiple values for input {k!r}")
        if key in sc.inputs:
            ins[key] = v
        elif key in by_name:
            attr = by_name[key]
            if attr[4] in (_ACT, _ext.ATTR_OUTPUT_ACTIVATION):
                v = _act(v)  # a name or dlfuse_activation_t integer
            attrs[attr[4]] = float(v) if attr[1] else int(v)
        else:
            raise TypeError(f"{name}() got an unexpected argument {k!r}; inputs {list(sc.inputs)}, "
                            f"attributes {list(by_name)}")
    for n, _is_float, required, _default, key in sc.attrs:
        if required and key not in attrs:
            raise TypeError(f"{name}() missing required attribute {n!r}")
    return tuple(ins.get(n) for n in sc.inputs), tuple(sorted(attrs.items()))


def _derive(name):
    sc = _ffi.schema(name)
    one = len(sc.outputs) == 1

    def run(inputs, attrs):
        return _ffi.call(name, dict(zip(sc.inputs, inputs)), sc.outputs, dict(attrs), broadcasts=False)

    backward = name + "_backward"
    if backward not in _core.op_names():
        def plain(*args, **kwargs):
            res = run(*_bind(name, sc, args, kwargs))
            return res[0] if one else tuple(res)
        plain.__name__ = plain.__qualname__ = name
        return plain

    bsc = _ffi.schema(backward)
    keys = {n: k for k, n in bsc.attr_names.items()}
    grads = tuple(("grad_" + n) if "grad_" + n in bsc.outputs else None for n in sc.inputs)

    # attrs and `like` (each input's shape and dtype, None where absent) are static.
    @functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
    def diff(attrs, like, *inputs):
        res = run(inputs, attrs)
        return res[0] if one else tuple(res)

    def diff_fwd(attrs, like, *inputs):
        res = run(inputs, attrs)
        env = {**dict(zip(sc.outputs, res)), **dict(zip(sc.inputs, inputs))}
        saved = {n: env[n] for n in bsc.inputs if n != "grad_out" and env.get(n) is not None}
        return (res[0] if one else tuple(res)), saved

    def diff_bwd(attrs, like, saved, ct):
        battrs = {keys[sc.attr_names[k]]: v for k, v in attrs if sc.attr_names[k] in keys}
        wanted = tuple(g for g, lk in zip(grads, like) if g and lk is not None)
        shapes = {n: lk[0] for n, lk in zip(sc.inputs, like) if lk is not None}
        got = dict(zip(wanted, _ffi.call(backward, {"grad_out": ct if one else ct[0], **saved}, wanted,
                                         battrs, shapes, broadcasts=False)))
        return tuple(None if lk is None else got[g] if g in got else jnp.zeros(lk[0], lk[1])
                     for g, lk in zip(grads, like))

    diff.defvjp(diff_fwd, diff_bwd)

    def differentiable(*args, **kwargs):
        inputs, attrs = _bind(name, sc, args, kwargs)
        like = tuple(None if x is None else (tuple(x.shape), jnp.dtype(x.dtype).name) for x in inputs)
        return diff(attrs, like, *inputs)
    differentiable.__name__ = differentiable.__qualname__ = name
    return differentiable
