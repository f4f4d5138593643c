"""The binding proper: finding libdlfuse, the registry, dlfuse.Tensor (DLPack
export) and the ops.

Everything goes through the one compiled module, dlfuse._ext (csrc/ext/): each op is an
_ext.OpFunction whose parameters come from the op's schema (argument parsing, DLPack import,
output allocation and the C call happen there); the registry's admin calls and
dlfuse.Tensor's device memory are its plain functions over the same loaded libdlfuse."""
from __future__ import annotations

import operator
import os
import sys
import threading
import weakref
from collections import namedtuple

from . import _ext
from ._errors import (STATUS_NAMES, ERROR_BY_STATUS, AbiMismatchError, DeviceError, Error,  # noqa: F401
                      InternalError, InvalidArgumentError, LoadFailedError, NotFoundError,
                      OutOfMemoryError, UnavailableError, UnsupportedError)

# DLPack's device types and dtype codes (dlpack.h)
kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLMetal = 1, 2, 3, 4, 7, 8
kDLROCM, kDLCUDAManaged, kDLOneAPI, kDLWebGPU = 10, 13, 14, 15
kDLFloat, kDLBfloat = 2, 4
DEVICE_NAMES = {kDLCPU: "cpu", kDLCUDA: "cuda", kDLCUDAHost: "cuda_host", kDLOpenCL: "opencl",
                kDLVulkan: "vulkan", kDLMetal: "metal", kDLROCM: "rocm",
                kDLCUDAManaged: "cuda_managed", kDLOneAPI: "oneapi", kDLWebGPU: "webgpu"}
DEVICE_TYPES = {v: k for k, v in DEVICE_NAMES.items()}
ACTIVATIONS = _ext.ACTIVATIONS


# ---- finding libdlfuse ---------------------------------------------------------------------


class LibraryNotFound(OSError):
    """libdlfuse.so could not be found; raised on first use, never at import."""


def _candidates():
    env = os.environ.get("DLFUSE_LIBRARY")
    if env:
        return [("$DLFUSE_LIBRARY", env)]
    out = [("the package", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib",
                                        "libdlfuse.so"))]
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, "/usr/local", "/usr"]):
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            out.append((f"prefix {prefix}", os.path.join(prefix, libdir, "libdlfuse.so")))
    out.append(("the loader's path", "libdlfuse.so"))
    return out


_lib_path = None
_lib_lock = threading.RLock()


def _load_library():
    """Loads libdlfuse into dlfuse._ext on first use; LibraryNotFound says what was tried."""
    global _lib_path
    if _lib_path is not None:
        return _lib_path
    with _lib_lock:
        if _lib_path is not None:
            return _lib_path
        tried = []
        for how, path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} ({how}): no such file")
                continue
            try:
                _lib_path = _ext.load(path, ERROR_BY_STATUS, Tensor, _alloc_fallback, registry)
                return _lib_path
            except OSError as e:
                tried.append(f"{path} ({how}): {e}")
        raise LibraryNotFound(
            "dlfuse: libdlfuse.so not found. Set DLFUSE_LIBRARY to its path (e.g. "
            "build/<preset>/lib/libdlfuse.so) or install dlfuse into a prefix. Tried: "
            + ("; ".join(tried) if tried else "nothing"))


def library_path():
    """The libdlfuse file in use (loading it on first use)."""
    return _load_library()

def last_error():
    """The calling thread's last C error message ('' if none)."""
    _load_library()
    return _ext.last_error()


def abi_version():
    _load_library()
    return _ext.abi_version()


# ---- registry ------------------------------------------------------------------------------

PluginInfo = namedtuple("PluginInfo", "index name version path available reason device_type "
                                      "device device_count abi num_kernels")


class Registry:
    """A set of loaded plugins (dlfuse_registry_t). Most programs use the process-wide
    default one (``dlfuse.registry()``); make your own to control discovery."""

    def __init__(self, plugin_paths=None, discovery=_ext.DISCOVER_DEFAULT):
        _load_library()
        if plugin_paths is not None and not isinstance(plugin_paths, (str, bytes)):
            plugin_paths = ":".join(str(p) for p in plugin_paths)
        if isinstance(plugin_paths, bytes):
            plugin_paths = os.fsdecode(plugin_paths)
        self._h = None
        self._h = _ext.registry_create(plugin_paths, int(discovery))
        self._destroy = _ext.registry_destroy
        self._tensors = weakref.WeakSet()
        self._ops = {}  # op name -> its handle here (dlfuse._ext's cache)

    @property
    def handle(self):
        return self._h

    def close(self):
        """Destroy the registry. No call on it may be in flight, and no dlfuse.Tensor
        allocated from it may be alive (InvalidArgumentError: their memory belongs to its
        plugins). Dropping the last reference closes it too (tensors hold one)."""
        live = len(self._tensors)
        if live:
            raise InvalidArgumentError(1, f"Registry.close: {live} dlfuse.Tensor(s) allocated "
                                          f"from this registry are still alive")
        h, self._h = self._h, None
        if h:
            self._destroy(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def load_plugin(self, path):
        """Load one plugin file; returns its PluginInfo, raises dlfuse.Error (with the C
        message) if it could not be loaded or opened. The file stays listed either way."""
        return self.plugin(_ext.registry_load(self._h, str(path)))

    def plugin(self, index):
        (name, version, path, available, reason, device_type, device_count, abi_major,
         abi_minor, num_kernels) = _ext.plugin_info(self._h, int(index))
        return PluginInfo(index=int(index), name=name, version=version, path=path,
                          available=bool(available), reason=reason, device_type=device_type,
                          device=DEVICE_NAMES.get(device_type, str(device_type)),
                          device_count=device_count, abi=(abi_major, abi_minor),
                          num_kernels=num_kernels)

    def plugins(self):
        return [self.plugin(i) for i in range(_ext.plugin_count(self._h))]

    def prefer(self, plugin_name, op=None):
        """Prefer a plugin for ``op`` (None: every op); plugin_name None clears."""
        _ext.prefer(self._h, op or None, plugin_name or None)

    def resolve(self, op, device="cpu", dtype="float32"):
        """Name of the plugin a call of ``op`` on (device, dtype) would run on."""
        dev_type = DEVICE_TYPES[device] if isinstance(device, str) else int(device)
        code, bits = _DTYPE_BY_NAME[str(dtype)]
        return self.plugin(_ext.resolve(self._h, op, dev_type, code, bits)).name

    def device_count(self, device):
        dev_type = DEVICE_TYPES[device] if isinstance(device, str) else int(device)
        return _ext.device_count(self._h, dev_type)

    def synchronize(self, device, stream=None):
        dev = _parse_device(device)
        _ext.device_synchronize(self._h, dev[0], dev[1], _stream_ptr(stream))


_default = None
_default_lock = threading.Lock()


def registry():
    """The process-wide default registry, created on first use with default discovery
    ($DLFUSE_PLUGIN_PATH, then <dir of libdlfuse>/dlfuse/plugins)."""
    global _default
    r = _default
    if r is None:
        with _default_lock:
            if _default is None:
                _default = Registry()
            r = _default
    return r


def plugins():
    """Every plugin of the default registry (available or not, with the reason)."""
    return registry().plugins()


def load_plugin(path):
    """Load a plugin file into the default registry; returns its PluginInfo."""
    return registry().load_plugin(path)


# ---- dtypes, devices, streams ----------------------------------------------------------------

_DTYPE_BY_NAME = {"float32": (kDLFloat, 32), "float16": (kDLFloat, 16),
                  "float64": (kDLFloat, 64), "bfloat16": (kDLBfloat, 16)}
_DTYPE_NAME = {v: k for k, v in _DTYPE_BY_NAME.items()}


def _dtype_name(code, bits):
    return _DTYPE_NAME.get((code, bits), f"dl({code},{bits})")


def _numpy_dtype(code, bits):
    import numpy as np
    name = _DTYPE_NAME.get((code, bits))
    if name == "bfloat16":
        try:
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            return None
    return np.dtype(name) if name else None


def _parse_device(device):
    """'cpu', 'cuda', 'cuda:1', 'opencl:0', 'webgpu:0', (type, id) -> (type, id)."""
    if isinstance(device, tuple):
        t, i = device
        return (DEVICE_TYPES[t] if isinstance(t, str) else int(t), int(i))
    name, _, idx = str(device).partition(":")
    if name not in DEVICE_TYPES:
        raise ValueError(f"dlfuse: unknown device {device!r}; expected one of "
                         f"{sorted(DEVICE_TYPES)} with an optional ':<id>'")
    return (DEVICE_TYPES[name], int(idx) if idx else 0)


# Devices whose DLPack producers take a stream (the DLPack stream protocol).
_STREAM_DEVICES = (kDLCUDA, kDLCUDAManaged, kDLROCM)


def _stream_ptr(stream):
    """A stream argument -> the address handed to C (None = the plugin's default)."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream, ...
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v or None
    raise TypeError(f"dlfuse: stream must be an int (a cudaStream_t / cl_command_queue "
                    f"address), None, or an object with .cuda_stream or .ptr; got {stream!r}")


# ---- outputs: allocated like the first input ------------------------------------------------


def _alloc_fallback(like, shape, code, bits, dev_type, dev_id, reg):
    """Called by the extension for an output whose first input's type has no DLPack
    exchange API and is not a host NumPy array: a new uninitialized tensor of `shape` with
    that dtype and device, from the same framework when it is PyTorch or CuPy, else NumPy
    for host memory and the plugins' device services for anything else."""
    fw = type(like).__module__.partition(".")[0]
    if fw == "torch":
        import torch
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if fw == "cupy":
        import cupy
        with cupy.cuda.Device(dev_id):
            return cupy.empty(shape, dtype=like.dtype)
    if dev_type == kDLCPU:
        npdt = _numpy_dtype(code, bits)
        if npdt is not None:
            import numpy as np
            return np.empty(shape, dtype=npdt)
    return Tensor.empty(shape, (code, bits), (dev_type, dev_id), registry=reg)


# ---- dlfuse.Tensor: memory from the plugins' device services, DLPack export -----------------


class Tensor:
    """A tensor in memory from a plugin's device services (dlfuse_device_alloc), freed with
    dlfuse_device_free when the last reference (including DLPack exports) is gone. It
    implements __dlpack__/__dlpack_device__, so torch/cupy/numpy take it without a copy
    (where they understand the device)."""

    def __init__(self, *a, **k):
        raise TypeError("use dlfuse.Tensor.empty(...) or dlfuse.to_device(...)")

    @classmethod
    def empty(cls, shape, dtype="float32", device="cpu", registry=None):
        reg = registry or globals()["registry"]()
        self = object.__new__(cls)
        self._ptr = None
        self._reg = reg
        code, bits = _DTYPE_BY_NAME[dtype] if isinstance(dtype, str) else dtype
        self._code, self._bits = int(code), int(bits)
        self._device = _parse_device(device)
        self._shape = tuple(int(s) for s in shape)
        n = 1
        for s in self._shape:
            if s < 0:
                raise ValueError(f"dlfuse: shape {self._shape} has a negative size")
            n *= s
        self._nbytes = n * (self._bits // 8)
        self._ptr = _ext.device_alloc(reg.handle, self._device[0], self._device[1], self._nbytes)
        reg._tensors.add(self)
        self._stream = None    # the stream of the last dlfuse call that wrote it
        self._written = False  # by a dlfuse call (to_device's copies have completed)
        self._t, self._tensor_addr = _ext.dltensor(self._ptr, self._device[0], self._device[1],
                                                   self._shape, self._code, self._bits)
        return self

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None:
            try:
                _ext.device_free(self._reg.handle, self._device[0], self._device[1], ptr)
            except Exception:
                pass

    shape = property(lambda self: self._shape)
    ndim = property(lambda self: len(self._shape))
    nbytes = property(lambda self: self._nbytes)
    dtype = property(lambda self: _dtype_name(self._code, self._bits))
    device = property(lambda self: (DEVICE_NAMES.get(self._device[0], str(self._device[0])),
                                    self._device[1]))

    def data_ptr(self):
        return self._ptr

    def __repr__(self):
        return f"dlfuse.Tensor(shape={self._shape}, dtype={self.dtype}, device={self.device})"

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("dlfuse.Tensor: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"dlfuse.Tensor lives on {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        if self._written and self._device[0] in _STREAM_DEVICES and stream != -1:
            # Make the last dlfuse call's work on this tensor visible to the consumer's
            # stream (DLPack: None and 1 are the legacy default stream, our None).
            consumer = None if stream in (None, 1) else _stream_ptr(stream)
            if consumer != self._stream:
                self._reg.synchronize(self.__dlpack_device__(), self._stream)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        # The capsule's managed tensor holds this Tensor until its consumer's deleter runs
        # (or, when no consumer takes it, until the capsule dies).
        return _ext.export(self, self._tensor_addr, versioned)

    def to_numpy(self):
        """A host copy as a NumPy array (a zero-copy view for CPU memory, except bfloat16,
        which NumPy's DLPack import does not take: a copy into an ml_dtypes array)."""
        import numpy as np
        npdt = _numpy_dtype(self._code, self._bits)
        if npdt is None:
            raise TypeError(f"dlfuse.Tensor.to_numpy: NumPy has no {self.dtype} dtype"
                            + (" (install ml_dtypes)" if self.dtype == "bfloat16" else ""))
        if self._device[0] == kDLCPU and self.dtype != "bfloat16":
            return np.from_dlpack(self)
        out = np.empty(self._shape, dtype=npdt)
        if self._nbytes:
            _ext.device_copy(self._reg.handle, self._device[0], self._device[1],
                             _ext.COPY_DEVICE_TO_HOST, out.ctypes.data, 0, self._ptr, 0,
                             self._nbytes, self._stream)
        return out


def to_device(array, device, registry=None, stream=None):
    """Copy a host array (NumPy or anything np.asarray takes) into a new dlfuse.Tensor on
    `device` ('cpu', 'cuda:0', 'opencl:0', ...) through the plugin's device services."""
    import numpy as np
    a = np.ascontiguousarray(array)
    name = _DTYPE_NAME.get((kDLBfloat if a.dtype.name == "bfloat16" else kDLFloat,
                            a.dtype.itemsize * 8))
    if name is None or a.dtype.kind not in "fV":
        raise TypeError(f"dlfuse.to_device: dtype {a.dtype} is not a float dtype dlfuse knows")
    t = Tensor.empty(a.shape, name, device, registry=registry)
    if t.nbytes:
        _ext.device_copy(t._reg.handle, t._device[0], t._device[1], _ext.COPY_HOST_TO_DEVICE,
                         t._ptr, 0, a.ctypes.data, 0, t.nbytes, _stream_ptr(stream))
    return t


def _act(activation, fn="dlfuse", name="activation"):
    """A dlfuse_activation_t from its name or integer (an attribute of kind "activation")."""
    return attr_value(fn, name, "activation", activation)


_EXPECTED = {"float": "a real number (FLOAT64 attribute)", "int": "an integer (INT64 attribute)",
             "flag": "a truth value (INT64 attribute of range [0, 1])"}
_NOT_NUMBERS = (str, bytes, bytearray)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def short_repr(value):
    """repr(value) cut to 80 characters, for a message ("(no repr)" where repr fails)."""
    try:
        return repr(value)[:80]
    except Exception:  # noqa: BLE001
        return "(no repr)"


def _bad_attr(kind, fn, name, expected, value):
    return kind(f"dlfuse: {fn}(): {name} must be {expected}, got {type(value).__name__} {short_repr(value)}")


def attr_value(fn, name, kind, value):
    """An attribute's value for function `fn` by its kind, from the op's schema (_ext.schema's
    sixth field: "float", "int", "flag" or "activation"), never from its key: a float, or an
    int (an activation also by its name). The same rules and messages as dlfuse._ext's
    functions: TypeError for a value of another type (an int attribute refuses 2.5, nothing is
    truncated), ValueError for an unknown activation name, each naming the attribute, what it
    must be and what it got."""
    t = type(value)
    if kind == "float":
        if t is float:
            return value
        if not isinstance(value, _NOT_NUMBERS):
            try:
                return float(value)  # ints, NumPy scalars, 0-d arrays: __float__ / __index__
            except Exception as e:  # noqa: BLE001  (any failure of the value's own conversion)
                raise _bad_attr(TypeError, fn, name, _EXPECTED["float"], value) from e
        raise _bad_attr(TypeError, fn, name, _EXPECTED["float"], value)
    if kind == "flag":
        try:
            return 1 if value else 0
        except Exception as e:  # noqa: BLE001
            raise _bad_attr(TypeError, fn, name, _EXPECTED["flag"], value) from e
    if t is int and INT64_MIN <= value <= INT64_MAX:
        return value
    if kind == "activation":
        expected = f"one of {sorted(ACTIVATIONS)} or a dlfuse_activation_t integer"
        if isinstance(value, str):
            try:
                return ACTIVATIONS[value]
            except KeyError:
                raise _bad_attr(ValueError, fn, name, expected, value) from None
    else:
        expected = _EXPECTED["int"]
    if isinstance(value, (float, *_NOT_NUMBERS)):
        raise _bad_attr(TypeError, fn, name, expected, value)
    try:
        v = operator.index(value)  # ints, NumPy integers, 0-d integer arrays
    except Exception as e:  # noqa: BLE001
        raise _bad_attr(TypeError, fn, name, expected, value) from e
    if not INT64_MIN <= v <= INT64_MAX:
        raise _bad_attr(ValueError, fn, name, "an integer in int64's range (INT64 attribute)", value)
    return v


def _load_ext():
    """Run by the extension on its first call: loads libdlfuse."""
    _load_library()


_ext.set_loader(_load_ext)


# ---- the ops: one _ext.OpFunction per op, its parameters read from the op's schema ---------
#
# An OpFunction takes each input, output and attribute by its schema name (docs/python.md,
# "Ops from their schemas"). The functions of ABI 1.0 and 1.1 were documented with positional
# orders before ops had schemas; those orders are kept here, as data: parameter names, then
# how many of them are required. Every other op takes its inputs, then its attributes,
# positionally.
_POSITIONAL = {
    "matmul_add_relu": (("a", "b", "bias", "out", "stream"), 3),
    "matmul_add_relu_backward": (("grad_out", "a", "b", "out"), 4),
    "add_mul_activation": (("x", "y", "bias", "multiplier", "activation", "out", "stream"), 3),
    "add_mul_activation_backward": (("grad_out", "x", "y", "bias", "multiplier", "activation"), 1),
    "matmul_add_activation": (("a", "b", "bias", "activation", "out", "pre"), 4),
    "matmul_add_activation_backward": (("grad_out", "a", "b", "activation", "out", "pre"), 4),
    "matmul_add_residual": (("a", "b", "bias", "residual", "out"), 4),
    "matmul_add_residual_backward": (("grad_out", "a", "b", "bias_shape", "residual_shape"), 3),
}

# dlfuse.torch's and dlfuse.jax's functions take an op's inputs (positionally or by name),
# then its attributes by name, and return its required outputs. The forward ops of ABI 1.0
# and 1.1 were documented before schemas with attributes that may also be given positionally
# after the inputs, in these orders, and a default activation; kept here, as data:
# op -> (attributes in positional order, front-end defaults by name).
FRONTEND_SIGNATURES = {
    "matmul_add_relu": (("allow_tf32",), {}),
    "add_mul_activation": (("multiplier", "activation"), {"activation": "relu"}),
    "matmul_add_activation": (("activation", "allow_tf32"), {"activation": "relu"}),
    "matmul_add_residual": (("allow_tf32",), {}),
}

_functions = {}
_functions_lock = threading.Lock()


def op_function(name):
    """The Python function of op `name` (a core op or a loaded plugin's own): an
    _ext.OpFunction, made once per name; its parameters come from the op's schema on its
    first call (.parameters() lists them)."""
    f = _functions.get(name)
    if f is None:
        with _functions_lock:
            f = _functions.get(name)
            if f is None:
                positional, nreq = _POSITIONAL.get(name, (None, -1))
                f = _functions[name] = _ext.OpFunction(
                    name, positional, nreq,
                    f"dlfuse op {name}: its inputs, outputs and attributes by their schema "
                    f"names (.parameters() lists them; docs/python.md)")
    return f


def require_op(name, front_end):
    """AttributeError for `front_end` (dlfuse.torch, dlfuse.jax) unless the default registry
    has an op `name` with a schema."""
    if name not in op_names():
        raise AttributeError(f"{front_end}: no op named {name!r} in the default registry "
                             f"(dlfuse.op_names() lists them)")


def op_names(registry=None):
    """The ops with a schema in `registry` (default: the default one): the core ops, then
    the ops its plugins declare."""
    return list(_ext.op_names(registry))


for _name in _ext.core_ops():
    globals()[_name] = op_function(_name)
del _name


def call(op, *inputs, out=None, stream=None, registry=None, **attrs):
    """Run any op by name, a plugin's own included (ABI 1.2), by its schema.

    `inputs` in the op's order (None where an optional one is absent); `attrs` by name, in
    any case (missing ones take their defaults); `out` None, or one entry per output (None
    where to allocate). Outputs are allocated like the first input, with the shapes the
    registry infers. Returns the output, or a tuple when the op has several."""
    return _ext.call(op, inputs, attrs, out, stream, registry)
