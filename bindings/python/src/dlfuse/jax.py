"""JAX integration: dlfuse's ops as functions usable inside ``jax.jit``, ``jax.grad`` and
``jax.vmap``, on CPU and CUDA (docs/jax.md).

    import jax, dlfuse.jax as djx
    y = djx.matmul_add_relu(x, w, b)                  # relu(x @ w + b)
    z = djx.add_mul_activation(x, y, b, 0.5, "silu")  # silu(x + b + 0.5 * y)
    h = djx.matmul_add_activation(x, w, b, "gelu_tanh")
    r = djx.matmul_add_residual(h, w2, b2, x)         # h @ w2 + b2 + x

Every function is derived from its op's schema, for the core ops and for any op a loaded
plugin declares alike (``dlfuse.jax.<op>`` or ``op_function(name)``). A call is one XLA
custom call (the FFI target ``dlfuse_call``, csrc/jax_ffi.cpp) that runs the libdlfuse op on
XLA's buffers: on CPU through the preferred CPU plugin, on CUDA on XLA's stream. Where the
registry also has ``<op>_backward`` the function is differentiable (jax.custom_vjp): the
forward keeps what libdlfuse's backward plan names (dlfuse_op_backward_plan), and the
backward computes only the gradients JAX asks for. vmap maps a core op whose output
broadcasts (a matmul's batch, NumPy broadcasting) to the op's own batch broadcasting.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from . import _core, _ext
from . import _jax_ffi as _ffi

__all__ = ["op_function", *_ext.core_ops()]

_ffi.load()

_MISSING = object()
_ARRAYS = (jax.Array, np.ndarray, np.generic)  # jax.Array covers tracers


def _attr(fn, name, kind, value):
    """An attribute's value by its kind in the op's schema (never by its key: a plugin's keys
    are its own), checked at trace time: attributes are static, an activation in range."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"dlfuse: {fn}(): {name} must be a static Python number (attributes are trace-time "
                        f"constants), got a traced value {_core.short_repr(value)}")
    v = _core.attr_value(fn, name, kind, value)
    if kind == "activation" and not 0 <= v < _ext.ACT_COUNT:
        raise ValueError(f"dlfuse: {fn}(): {name} must be one of {sorted(_ext.ACTIVATIONS)} or "
                         f"0..{_ext.ACT_COUNT - 1}, got {value!r}")
    return v


def _platform():
    return "cuda" if jax.default_backend() in ("gpu", "cuda") else "cpu"


# ---- rank padding: what makes vmap the ops' own batch broadcasting -------------------------
#
# Every operand is reshaped to the call's rank (leading 1s, free in XLA) before the call, so
# that vmap's batch dim goes in front of every operand, where the ops broadcast it as a batch
# dim (the batching rule: _jax_ffi._batchable).

def _pad(x, rank):
    return x if x.ndim == rank else jnp.reshape(x, (1,) * (rank - x.ndim) + x.shape)


def _pad_shape(shape, rank):
    return (1,) * (rank - len(shape)) + tuple(shape)


class _Op:
    """One op's JAX function, from its schema: argument binding, the call, and (with a
    backward op) its custom_vjp."""

    def __init__(self, name):
        self.name = name
        self.sc = _ffi.schema(name)
        # Attributes a caller may pass positionally after the inputs, and front-end defaults
        # (_core.FRONTEND_SIGNATURES); every other op takes its attributes by name.
        self.positional, self.defaults = _core.FRONTEND_SIGNATURES.get(name, ((), {}))
        self.by_name = {a[0]: a for a in self.sc.attrs}
        self.required = tuple(n for n in self.sc.outputs if n not in self.sc.optional_outputs) or self.sc.outputs
        backward = name + "_backward"
        self.backward = backward if backward in _core.op_names() else None
        forward = name[:-len("_backward")] if name.endswith("_backward") else None
        self.broadcasts = self.sc.broadcasts or bool(
            forward and forward in _core.op_names() and _ffi.schema(forward).broadcasts)

    def bind(self, args, kwargs):
        """(inputs in schema order, ((attr key, value), ...), wanted outputs) of a call."""
        sc, name = self.sc, self.name
        n_in = len(sc.inputs)
        if len(args) > n_in + len(self.positional):
            also = f" and the attributes {', '.join(self.positional)}" if self.positional else ""
            raise TypeError(f"{name}() takes {n_in} inputs{also}, got {len(args)} positional arguments")
        ins = dict(zip(sc.inputs, args))
        given = dict(zip(self.positional, args[n_in:]))
        wanted = self.required
        for k, v in kwargs.items():
            key = k.lower()
            if key == "outputs":
                wanted = self._outputs(v)
            elif key in sc.inputs:
                if key in ins:
                    raise TypeError(f"{name}() got multiple values for input {k!r}")
                ins[key] = v
            elif key in self.by_name:
                if key in given:
                    raise TypeError(f"{name}() got multiple values for attribute {k!r}")
                given[key] = v
            else:
                raise TypeError(f"{name}() got an unexpected argument {k!r}; inputs {list(sc.inputs)}, "
                                f"attributes {list(self.by_name)}")
        for n, x in ins.items():
            if x is not None and not isinstance(x, _ARRAYS):
                raise TypeError(f"dlfuse.jax.{name}(): {n} must be an array (jax.Array or numpy.ndarray)"
                                f"{' or None' if n in sc.optional_inputs else ''}, got {type(x).__name__} "
                                f"{_core.short_repr(x)}")
        attrs = []
        for n, _is_float, required, _default, key, kind in sc.attrs:
            v = given.get(n, self.defaults.get(n, _MISSING))
            if v is _MISSING:
                if required:
                    raise TypeError(f"{name}() missing required attribute {n!r}")
                continue
            attrs.append((key, _attr(name, n, kind, v)))
        return tuple(ins.get(n) for n in sc.inputs), tuple(attrs), wanted

    def _outputs(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        for n in names:
            if n not in self.sc.outputs:
                raise TypeError(f"{self.name}(): outputs names {n!r}; expected some of {list(self.sc.outputs)}")
        if not names:
            raise TypeError(f"{self.name}(): outputs is empty; expected some of {list(self.sc.outputs)}")
        return names

    def __call__(self, *args, **kwargs):
        inputs, attrs, wanted = self.bind(args, kwargs)
        if self.backward is None:
            res = self.run(inputs, attrs, wanted)
        else:
            res = _differentiable(self, attrs, wanted, *inputs)
        return res[0] if len(wanted) == 1 else tuple(res)

    def run(self, inputs, attrs, wanted, shapes=None, backward=False):
        """The call on `inputs` (schema order, None where absent), returning the outputs named
        in `wanted`; `shapes` are the forward's input shapes that reducible gradients take."""
        given = {n: x for n, x in zip(self.sc.inputs, inputs) if x is not None}
        attrs = dict(attrs)
        if not self.broadcasts:
            return list(_ffi.call(self.name, given, wanted, attrs, shapes, broadcasts=False))
        real = _ffi.output_shapes_of(self.name, given, wanted, attrs, shapes)  # checks the caller's shapes
        rank = max([len(s) for s in real] + [x.ndim for x in given.values()])
        padded = {n: _pad(x, rank) for n, x in given.items()}
        pshapes = {n: _pad_shape(s, rank) for n, s in (shapes or {}).items()}
        res = _ffi.call(self.name, padded, wanted, attrs, pshapes, backward)
        return [r if r.shape == s else jnp.reshape(r, s) for r, s in zip(res, real)]

    def plan(self, attrs, inputs):
        """(backward op, inputs of it to keep, outputs to write): libdlfuse's backward plan
        for this call on the default device's platform."""
        dt = _ffi.dtype_of(self.name, dict(zip(self.sc.inputs, inputs)))
        code, bits = _ffi.DL_DTYPE[dt.name]
        named = {self.sc.attr_names[k]: v for k, v in attrs}
        return _ext.backward_plan(self.name, named, _core.DEVICE_TYPES[_platform()], code, bits, None)


# ---- differentiation ------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _differentiable(op, attrs, wanted, *inputs):
    return tuple(op.run(inputs, attrs, wanted))


def _forward(op, attrs, wanted, *inputs):
    values = tuple(None if x is None else x.value for x in inputs)
    perturbed = tuple(x is not None and x.perturbed for x in inputs)
    _backward_op, keep, write = op.plan(attrs, values)  # the op named op.backward
    written = wanted + tuple(n for k, n in enumerate(op.sc.outputs) if write >> k & 1 and n not in wanted)
    res = op.run(values, attrs, written)
    env = {**dict(zip(op.sc.inputs, values)), **dict(zip(written, res))}
    bsc = _ffi.schema(op.backward)
    saved = {n: env.get(n) for i, n in enumerate(bsc.inputs) if i and keep >> i & 1}
    shapes = {n: tuple(x.shape) for n, x in zip(op.sc.inputs, values) if x is not None}
    return tuple(res[:len(wanted)]), (saved, shapes, perturbed)


def _backward(op, attrs, wanted, residuals, cts):
    saved, shapes, perturbed = residuals
    first = op.sc.outputs[0]  # the backward's grad_out is its gradient; the others' are dropped
    ct = cts[wanted.index(first)] if first in wanted else None
    if ct is None or isinstance(ct, SymbolicZero) or not any(perturbed):
        return (None,) * len(perturbed)
    b = op_function(op.backward).op
    grads = ["grad_" + n for n in op.sc.inputs]
    want = tuple(g for g, p in zip(grads, perturbed) if p and g in b.sc.outputs)
    if not want:
        return (None,) * len(perturbed)
    names = {op.sc.attr_names[k]: v for k, v in attrs}
    # the forward's attributes of the same name, each by the backward's own key and kind
    battrs = tuple((key, _attr(b.name, n, kind, names[n])) for n, _f, _r, _d, key, kind in b.sc.attrs if n in names)
    inputs = tuple(ct if i == 0 else saved.get(n) for i, n in enumerate(b.sc.inputs))
    got = dict(zip(want, b.run(inputs, battrs, want, shapes, backward=True)))
    return tuple(got.get(g) if p else None for g, p in zip(grads, perturbed))


_differentiable.defvjp(_forward, _backward, symbolic_zeros=True)


# ---- the functions ----------------------------------------------------------------------------

_functions = {}


def op_function(name):
    """dlfuse.jax's function of op `name`, a core op or one a plugin of the default registry
    declares (docs/jax.md, "The functions"):

        f(*inputs, <attributes>, outputs=None) -> the output, or a tuple of outputs

    inputs positional in schema order (None for an absent optional one) or by name;
    attributes by name (case-insensitive; activations also by their names) with the schema's
    defaults, and positionally after the inputs for the four forward ops of ABI 1.0/1.1 (in
    their documented order); `outputs` names the outputs to compute and return (default: the
    required ones, or every one where all are optional)."""
    f = _functions.get(name)
    if f is None:
        _core.require_op(name, "dlfuse.jax")
        op = _Op(name)

        def f(*args, **kwargs):
            return op(*args, **kwargs)
        f.__name__ = f.__qualname__ = name
        f.__doc__ = (f"dlfuse op {name}: inputs {list(op.sc.inputs)}, attributes {list(op.by_name)}, "
                     f"outputs {list(op.sc.outputs)} (returns {list(op.required)} by default)")
        f.op = op
        f = _functions.setdefault(name, f)
        globals().setdefault(name, f)  # a module attribute from now on, not __getattr__
    return f


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return op_function(name)
    except AttributeError:
        raise AttributeError(f"module 'dlfuse.jax' has no attribute {name!r}") from None
