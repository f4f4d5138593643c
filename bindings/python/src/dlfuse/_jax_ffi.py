"""dlfuse.jax's way into XLA: loads libdlfuse_jax.so (csrc/jax_ffi.cpp), binds it to the
libdlfuse this package loaded, registers its handlers as the FFI target ``dlfuse_call`` on
CPU and CUDA, and builds the ``jax.ffi.ffi_call`` of any op from its schema: input and output
names from libdlfuse's op table, output shapes (and the op's shape rules, checked at trace
time) from dlfuse_op_infer_outputs."""
import ctypes
import functools
import importlib.metadata
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np

from . import _core, _ext

LIBRARY = "libdlfuse_jax.so"
TARGET = "dlfuse_call"
DTYPES = ("float32", "float16", "bfloat16", "float64")
DL_DTYPE = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16), "float64": (2, 64)}
_OPTIONAL, _REDUCIBLE = 1, 2  # DLFUSE_ARG_OPTIONAL, DLFUSE_ARG_REDUCIBLE
_SHAPE_MATMUL, _SHAPE_BROADCAST = 1, 2  # DLFUSE_SHAPE_MATMUL, DLFUSE_SHAPE_BROADCAST

_lib = None


def _library_file():
    # beside dlfuse._ext: the wheel's dlfuse/, or a build tree's <build>/python/dlfuse/
    path = os.path.join(os.path.dirname(os.path.abspath(_ext.__file__)), LIBRARY)
    if not os.path.exists(path):
        raise ImportError(
            f"dlfuse.jax: {path} is missing: dlfuse was built without jaxlib (Python < 3.11, "
            "DLFUSE_JAX_FFI=OFF, or a build without build isolation and without jaxlib); "
            "reinstall with `pip install ./bindings/python` (docs/jax.md)")
    return path


def _release(version):
    """(major, minor, patch) of a release string such as "0.10.2" or "0.11.0.dev20261101"."""
    parts = []
    for p in version.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, p))
        parts.append(int(digits or 0))
    return tuple(parts + [0] * (3 - len(parts)))


def _check_jaxlib(lib):
    """The handlers read call frames as the jaxlib they were compiled against lays them out;
    an older jaxlib may pass less than that, so it is refused by name."""
    lib.dlfuse_jax_built_against.restype = ctypes.c_char_p
    built = lib.dlfuse_jax_built_against().decode()
    running = importlib.metadata.version("jaxlib")
    if _release(running) < _release(built):
        raise ImportError(
            f"dlfuse.jax: the XLA FFI handlers were built against jaxlib {built}; this Python runs "
            f"jaxlib {running}: expected jaxlib >= {built} (upgrade jax, or rebuild dlfuse against "
            "this jaxlib: docs/jax.md)")


def load():
    """Loads, binds and registers the handlers once per process."""
    global _lib
    if _lib is not None:
        return
    lib = ctypes.CDLL(_library_file())
    _check_jaxlib(lib)
    _core.library_path()  # libdlfuse loaded (raises LibraryNotFound with what it tried)
    fns = [ctypes.c_void_p(_ext.symbol(n))
           for n in ("dlfuse_op_get", "dlfuse_op_call", "dlfuse_last_error", "dlfuse_status_string")]
    lib.dlfuse_jax_bind.argtypes = [ctypes.c_void_p] * 5
    lib.dlfuse_jax_bind.restype = ctypes.c_int
    if lib.dlfuse_jax_bind(_core.registry().handle, *fns) != 0:
        raise ImportError("dlfuse.jax: binding libdlfuse to the handlers failed")
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.dlfuse_jax_cpu), platform="cpu")
    # No command-buffer trait: csrc/jax_ffi.cpp says why
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.dlfuse_jax_cuda), platform="CUDA")
    _lib = lib


def dtype_of(op, inputs):
    """The one dtype of a call's arrays; InvalidArgumentError naming the first that differs."""
    named = [(n, x) for n, x in inputs.items() if x is not None]
    dt = np.dtype(named[0][1].dtype)
    if dt.name not in DTYPES:
        raise _core.InvalidArgumentError(
            1, f"{op}: {named[0][0]}: expected a dtype of {', '.join(DTYPES)}, got {dt.name}")
    for n, x in named[1:]:
        if np.dtype(x.dtype) != dt:
            raise _core.InvalidArgumentError(
                1, f"{op}: {n}: expected dtype {dt.name} ({named[0][0]}'s), got {np.dtype(x.dtype).name}")
    return dt


def _attr_arrays(op, attrs):
    """dlfuse attributes {key: value} of `op` as the handler's arrays (each with its one
    leading placeholder: FFI array attributes cannot be empty), each typed by the op's schema
    (a key is the op's own: its type is the schema's, not the value's nor a core op's)."""
    is_float = schema(op).attr_is_float
    i64, fk, fv = [0], [0], [0.0]
    for key, value in attrs.items():
        if is_float.get(key, not isinstance(value, (bool, int, np.integer))):
            fk.append(int(key))
            fv.append(float(value))
        else:
            i64 += [int(key), int(value)]
    return (np.array(i64, np.int64), np.array(fk, np.int64), np.array(fv, np.float64))


class _Schema:
    """What dlfuse.jax reads of an op's schema (dlfuse._ext.schema)."""

    def __init__(self, op):
        ins, outs, attrs = _ext.schema(op, None)
        self.inputs = tuple(n for n, *_ in ins)
        self.outputs = tuple(n for n, *_ in outs)
        self.reducible = frozenset(n for n, flags, *_ in outs if flags & _REDUCIBLE)
        self.optional_outputs = frozenset(n for n, flags, *_ in outs if flags & _OPTIONAL)
        self.attr_names = {key: name for name, _f, _r, _d, key, _k in attrs}
        self.attr_is_float = {key: bool(is_float) for _n, is_float, _r, _d, key, _k in attrs}
        self.attrs = tuple(attrs)  # (lower-case name, is_float, required, default, key, kind)
        self.optional_inputs = frozenset(n for n, flags, *_ in ins if flags & _OPTIONAL)
        # The two inputs of a MATMUL rule (a matmul's batch comes from them), else None.
        _n, _f, _a, rule, bits = outs[0]
        self.matmul = (tuple(n for j, n in enumerate(self.inputs) if bits >> j & 1)
                       if rule == _SHAPE_MATMUL else None)
        # A core op whose output is a matmul's or a broadcast's: its batch dims are NumPy
        # broadcasting, which vmap maps onto (_batchable). Any other op's are its own.
        self.broadcasts = op in _ext.core_ops() and rule in (_SHAPE_MATMUL, _SHAPE_BROADCAST)


@functools.lru_cache(maxsize=None)
def schema(op):
    return _Schema(op)


def _fits(op, arg, shape, target):
    """Checks that the forward's `shape` of `arg` broadcasts to its gradient's widest shape."""
    if len(shape) > len(target) or any(s not in (1, t) for s, t in zip(reversed(shape), reversed(target))):
        raise _core.InvalidArgumentError(
            1, f"{op}: {arg}: expected a shape that broadcasts to {tuple(target)}, got {tuple(shape)}")


def output_shapes(op, shapes, dtype, attrs, wanted, forward=None):
    """The shapes of `op`'s outputs named in `wanted` for inputs of `shapes` (name -> shape of
    every input given) and `dtype`, attributes by key: libdlfuse's inference, which also
    applies the op's own rules. A reducible gradient grad_<x> takes the shape of the forward's
    <x> where `forward` has it. Raises InvalidArgumentError naming the argument."""
    sc = schema(op)
    code, bits = DL_DTYPE[np.dtype(dtype).name]
    named = {sc.attr_names[k]: v for k, v in attrs.items()}
    inferred = dict(zip(sc.outputs, _ext.infer(op, [shapes.get(n) for n in sc.inputs], code, bits, named, None)))
    res = []
    for name in wanted:
        shape, source = tuple(inferred[name]), name[5:] if name.startswith("grad_") else None
        if name in sc.reducible and forward and source in forward:
            _fits(op, source, forward[source], shape)
            shape = tuple(forward[source])
        res.append(shape)
    return tuple(res)


def output_shapes_of(op, given, wanted, attrs, shapes=None):
    """The shapes of the outputs named in `wanted` of `op` on the arrays `given` (name ->
    array), `shapes` giving the forward's tensors that reducible gradients take their shapes
    from; raises InvalidArgumentError naming the argument when a dtype or shape does not fit."""
    dt = dtype_of(op, given)
    return output_shapes(op, {n: tuple(x.shape) for n, x in given.items()}, dt, attrs, wanted, shapes)


def _ffi_call(op, given, wanted, attrs, shapes, vmap_method=None):
    """The custom call itself: checks dtypes and shapes, declares the outputs."""
    sc = schema(op)
    dt = dtype_of(op, given)
    out_shapes = output_shapes(op, {n: tuple(x.shape) for n, x in given.items()}, dt, attrs, wanted, shapes)
    present = [n for n in sc.inputs if n in given]
    in_map = [0] + [present.index(n) if n in given else -1 for n in sc.inputs]
    out_map = [0] + [wanted.index(n) if n in wanted else -1 for n in sc.outputs]
    i64, fk, fv = _attr_arrays(op, attrs)
    result = [jax.ShapeDtypeStruct(s, dt) for s in out_shapes]
    return jax.ffi.ffi_call(TARGET, result, vmap_method=vmap_method)(
        *(given[n] for n in present), op=op, inputs=np.array(in_map, np.int64),
        outputs=np.array(out_map, np.int64), i64_attrs=i64, f64_keys=fk, f64_values=fv)


def _batchable(op, names, wanted, attrs, shapes, backward):
    """The call as a function of its arrays, with its batching rule: the ops' own batch
    broadcasting. The arrays come with the output's rank (dlfuse.jax pads them), so vmap's
    dim goes in front of each. A forward gives an unbatched operand a batch dim of 1, except
    that a matmul's batch must come from a or b (a is broadcast when only bias or residual is
    batched). A backward broadcasts every operand to the batch: a per-example gradient of an
    unbatched operand has the batch dim that the operand lacks."""
    @jax.custom_batching.custom_vmap
    def run(*args):
        return _ffi_call(op, dict(zip(names, args)), wanted, attrs, shapes)

    @run.def_vmap
    def rule(axis_size, in_batched, *args):
        args, batched = list(args), dict(zip(names, in_batched))
        like = shapes
        if backward:
            args = [x if bt else jnp.broadcast_to(x, (axis_size, *x.shape))
                    for x, bt in zip(args, in_batched)]
            like = {n: (axis_size, *s) for n, s in shapes.items()}
        else:
            args = [x if bt else x[None] for x, bt in zip(args, in_batched)]
            mm = schema(op).matmul
            if mm and not any(batched.get(n) for n in mm):
                i = names.index(mm[0])
                args[i] = jnp.broadcast_to(args[i], (axis_size, *args[i].shape[1:]))
        res = _batchable(op, names, wanted, attrs, like, backward)(*args)
        return res, [True] * len(res)

    return run


def call(op, inputs, wanted, attrs=None, shapes=None, backward=False, broadcasts=True):
    """Runs `op` on `inputs` (name -> array, None or missing for a NULL input) and returns
    its outputs named in `wanted` (the others are NULL). `shapes` gives the shapes of the
    forward's tensors that reducible gradients take their shapes from. Shapes and dtypes are
    checked here, at trace time; what only the kernel can refuse comes back as JAX's error.
    `backward` picks the batching rule (_batchable); an op whose batch dims are not NumPy
    broadcasting (`broadcasts` False: an op dlfuse.jax knows only by its schema) is vmapped
    one example at a time."""
    given = {n: x for n, x in inputs.items() if x is not None}
    if not broadcasts:
        return _ffi_call(op, given, tuple(wanted), attrs or {}, shapes or {}, vmap_method="sequential")
    names = tuple(n for n in schema(op).inputs if n in given)
    fn = _batchable(op, names, tuple(wanted), attrs or {}, shapes or {}, backward)
    return fn(*(given[n] for n in names))
