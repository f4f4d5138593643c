"""The binding proper: errors, the registry, dlfuse.Tensor (DLPack export) and the four ops.

The ops are the compiled module's functions (dlfuse._ext, csrc/ext.c): argument parsing,
DLPack import (the exchange API or __dlpack__), output allocation and the C call happen
there. This module keeps what is not per call: the registry's admin calls and
dlfuse.Tensor's device memory (ctypes over the same loaded libdlfuse)."""
from __future__ import annotations

import ctypes
import threading
import weakref
from collections import namedtuple
from ctypes import byref, c_int32, c_uint32, c_void_p

from . import _capi as C
from . import _ext

# ---- errors ------------------------------------------------------------------------------


class Error(RuntimeError):
    """A dlfuse call failed. ``status`` is the dlfuse_status_t value, ``status_name`` its
    name, ``message`` the C side's message (dlfuse_last_error) when it came from C."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = C.STATUS_NAMES.get(self.status, str(self.status))
        self.message = message
        super().__init__(f"[{self.status_name}] {message}")


class InvalidArgumentError(Error, ValueError):
    pass


class UnsupportedError(Error):
    pass


class NotFoundError(Error, LookupError):
    pass


class AbiMismatchError(Error):
    pass


class LoadFailedError(Error):
    pass


class UnavailableError(Error):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class DeviceError(Error):
    pass


class InternalError(Error):
    pass


_ERRORS = {1: InvalidArgumentError, 2: UnsupportedError, 3: NotFoundError, 4: AbiMismatchError,
           5: LoadFailedError, 6: UnavailableError, 7: OutOfMemoryError, 8: DeviceError,
           9: InternalError}


def _raise(status, message=None):
    if message is None:
        message = C.lib().dlfuse_last_error().decode("utf-8", "replace")
    raise _ERRORS.get(status, Error)(status, message)


def _check(status):
    if status:
        _raise(status)


def last_error():
    """The calling thread's last C error message ('' if none)."""
    return C.lib().dlfuse_last_error().decode("utf-8", "replace")


def abi_version():
    lib = C.lib()
    ma, mi = c_uint32(), c_uint32()
    lib.dlfuse_abi_version(byref(ma), byref(mi))
    return (ma.value, mi.value)


# ---- registry ------------------------------------------------------------------------------

PluginInfo = namedtuple("PluginInfo", "index name version path available reason device_type "
                                      "device device_count abi num_kernels")


class Registry:
    """A set of loaded plugins (dlfuse_registry_t). Most programs use the process-wide
    default one (``dlfuse.registry()``); make your own to control discovery."""

    def __init__(self, plugin_paths=None, discovery=C.DISCOVER_DEFAULT):
        self._lib = C.lib()
        opts = C.dlfuse_registry_options_t()
        opts.struct_size = ctypes.sizeof(opts)
        opts.discovery = int(discovery)
        if plugin_paths is not None and not isinstance(plugin_paths, (str, bytes)):
            plugin_paths = ":".join(str(p) for p in plugin_paths)
        opts.plugin_paths = plugin_paths.encode() if isinstance(plugin_paths, str) else plugin_paths
        h = c_void_p()
        _check(self._lib.dlfuse_registry_create(byref(opts), byref(h)))
        self._h = h.value
        self._destroy = self._lib.dlfuse_registry_destroy
        self._tensors = weakref.WeakSet()

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
        idx = c_int32(-1)
        st = self._lib.dlfuse_registry_load(self._h, str(path).encode(), byref(idx))
        if st:
            _raise(st)
        return self.plugin(idx.value)

    def plugin(self, index):
        info = C.dlfuse_plugin_info_t()
        info.struct_size = ctypes.sizeof(info)
        _check(self._lib.dlfuse_registry_plugin_info(self._h, int(index), byref(info)))

        def s(b):
            return b.decode("utf-8", "replace") if b else ""
        return PluginInfo(index=int(index), name=s(info.name), version=s(info.version),
                          path=s(info.path), available=bool(info.available),
                          reason=s(info.reason), device_type=info.device_type,
                          device=C.DEVICE_NAMES.get(info.device_type, str(info.device_type)),
                          device_count=info.device_count,
                          abi=(info.abi_major, info.abi_minor), num_kernels=info.num_kernels)

    def plugins(self):
        n = c_int32()
        _check(self._lib.dlfuse_registry_plugin_count(self._h, byref(n)))
        return [self.plugin(i) for i in range(n.value)]

    def prefer(self, plugin_name, op=None):
        """Prefer a plugin for ``op`` (None: every op); plugin_name None clears."""
        _check(self._lib.dlfuse_registry_prefer(
            self._h, op.encode() if op else None,
            plugin_name.encode() if plugin_name else None))

    def resolve(self, op, device="cpu", dtype="float32"):
        """Name of the plugin a call of ``op`` on (device, dtype) would run on."""
        h = c_void_p()
        _check(self._lib.dlfuse_op_get(self._h, op.encode(), byref(h)))
        dev_type = C.DEVICE_TYPES[device] if isinstance(device, str) else int(device)
        code, bits = _DTYPE_BY_NAME[str(dtype)]
        idx = c_int32()
        _check(self._lib.dlfuse_op_resolve(h, dev_type, C.DLDataType(code, bits, 1), byref(idx)))
        return self.plugin(idx.value).name

    def device_count(self, device):
        dev_type = C.DEVICE_TYPES[device] if isinstance(device, str) else int(device)
        n = c_int32()
        _check(self._lib.dlfuse_device_count(self._h, dev_type, byref(n)))
        return n.value

    def synchronize(self, device, stream=None):
        dev = _parse_device(device)
        _check(self._lib.dlfuse_device_synchronize(self._h, C.DLDevice(*dev),
                                                   _stream_ptr(stream)))


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

_DTYPE_BY_NAME = {"float32": (C.kDLFloat, 32), "float16": (C.kDLFloat, 16),
                  "float64": (C.kDLFloat, 64), "bfloat16": (C.kDLBfloat, 16)}
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
        return (C.DEVICE_TYPES[t] if isinstance(t, str) else int(t), int(i))
    name, _, idx = str(device).partition(":")
    if name not in C.DEVICE_TYPES:
        raise ValueError(f"dlfuse: unknown device {device!r}; expected one of "
                         f"{sorted(C.DEVICE_TYPES)} with an optional ':<id>'")
    return (C.DEVICE_TYPES[name], int(idx) if idx else 0)


# Devices whose DLPack producers take a stream (the DLPack stream protocol).
_STREAM_DEVICES = (C.kDLCUDA, C.kDLCUDAManaged, C.kDLROCM)


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
    if dev_type == C.kDLCPU:
        npdt = _numpy_dtype(code, bits)
        if npdt is not None:
            import numpy as np
            return np.empty(shape, dtype=npdt)
    return Tensor.empty(shape, (code, bits), (dev_type, dev_id), registry=reg)


# ---- DLPack export (producer side): memory from the plugins' device services ----------------

_exports = {}  # address of a DLManagedTensorVersioned / DLManagedTensor -> what keeps it alive
_exports_lock = threading.Lock()


def _release(addr):
    with _exports_lock:
        _exports.pop(addr, None)


# The deleters consumers call (C, in dlfuse._ext: a ctypes callback cannot run while the
# consumer's own exception is pending).
_deleter_addr = _ext.export_deleter(_release)
_deleter_v = C.DLManagedTensorVersionedDeleter(_deleter_addr)
_deleter_l = C.DLManagedTensorDeleter(_deleter_addr)


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
        self._reg = reg
        code, bits = _DTYPE_BY_NAME[dtype] if isinstance(dtype, str) else dtype
        dev = _parse_device(device)
        self._shape = tuple(int(s) for s in shape)
        n = 1
        for s in self._shape:
            if s < 0:
                raise ValueError(f"dlfuse: shape {self._shape} has a negative size")
            n *= s
        self._nbytes = n * (bits // 8)
        self._device = C.DLDevice(*dev)
        ptr = c_void_p()
        self._ptr = None
        _check(reg._lib.dlfuse_device_alloc(reg.handle, self._device, self._nbytes, byref(ptr)))
        self._ptr = ptr.value
        reg._tensors.add(self)
        self._stream = None    # the stream of the last dlfuse call that wrote it
        self._written = False  # by a dlfuse call (to_device's copies have completed)
        nd = len(self._shape)
        self._shape_arr = (ctypes.c_int64 * max(nd, 1))(*self._shape)
        t = C.DLTensor()
        t.data = self._ptr
        t.device = self._device
        t.ndim = nd
        t.dtype = C.DLDataType(code, bits, 1)
        t.shape = ctypes.cast(self._shape_arr, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        t.byte_offset = 0
        self._t = t
        self._tensor_addr = ctypes.addressof(t)
        return self

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None:
            try:
                self._reg._lib.dlfuse_device_free(self._reg.handle, self._device, ptr)
            except Exception:
                pass

    shape = property(lambda self: self._shape)
    ndim = property(lambda self: len(self._shape))
    nbytes = property(lambda self: self._nbytes)
    dtype = property(lambda self: _dtype_name(self._t.dtype.code, self._t.dtype.bits))
    device = property(lambda self: (C.DEVICE_NAMES.get(self._device.device_type,
                                                       str(self._device.device_type)),
                                    self._device.device_id))

    def data_ptr(self):
        return self._ptr

    def __repr__(self):
        return f"dlfuse.Tensor(shape={self._shape}, dtype={self.dtype}, device={self.device})"

    def __dlpack_device__(self):
        return (self._device.device_type, self._device.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("dlfuse.Tensor: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"dlfuse.Tensor lives on {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        if self._written and self._device.device_type in _STREAM_DEVICES and stream != -1:
            # Make the last dlfuse call's work on this tensor visible to the consumer's
            # stream (DLPack: None and 1 are the legacy default stream, our None).
            consumer = None if stream in (None, 1) else _stream_ptr(stream)
            if consumer != self._stream:
                self._reg.synchronize(self.__dlpack_device__(), self._stream)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if versioned:
            m = C.DLManagedTensorVersioned()
            m.version.major, m.version.minor = 1, 0
            m.deleter = _deleter_v
            m.flags = 0
        else:
            m = C.DLManagedTensor()
            m.deleter = _deleter_l
        tgt = m.dl_tensor
        ctypes.memmove(ctypes.addressof(tgt), self._tensor_addr, ctypes.sizeof(C.DLTensor))
        addr = ctypes.addressof(m)
        m.manager_ctx = addr
        with _exports_lock:
            _exports[addr] = (m, self)  # the struct and the owner stay alive until released
        # Renamed to used_* = a consumer took it and calls the deleter; still dltensor* when
        # it dies = nobody did, and the capsule's destructor releases it.
        return _ext.export_capsule(addr, versioned)

    def to_numpy(self):
        """A host copy as a NumPy array (a zero-copy view for CPU memory, except bfloat16,
        which NumPy's DLPack import does not take: a copy into an ml_dtypes array)."""
        import numpy as np
        npdt = _numpy_dtype(self._t.dtype.code, self._t.dtype.bits)
        if npdt is None:
            raise TypeError(f"dlfuse.Tensor.to_numpy: NumPy has no {self.dtype} dtype"
                            + (" (install ml_dtypes)" if self.dtype == "bfloat16" else ""))
        if self._device.device_type == C.kDLCPU and self.dtype != "bfloat16":
            return np.from_dlpack(self)
        out = np.empty(self._shape, dtype=npdt)
        if self._nbytes:
            _check(self._reg._lib.dlfuse_device_copy(
                self._reg.handle, self._device, C.COPY_DEVICE_TO_HOST, out.ctypes.data, 0,
                self._ptr, 0, self._nbytes, self._stream))
        return out


def to_device(array, device, registry=None, stream=None):
    """Copy a host array (NumPy or anything np.asarray takes) into a new dlfuse.Tensor on
    `device` ('cpu', 'cuda:0', 'opencl:0', ...) through the plugin's device services."""
    import numpy as np
    a = np.ascontiguousarray(array)
    name = _DTYPE_NAME.get((C.kDLBfloat if a.dtype.name == "bfloat16" else C.kDLFloat,
                            a.dtype.itemsize * 8))
    if name is None or a.dtype.kind not in "fV":
        raise TypeError(f"dlfuse.to_device: dtype {a.dtype} is not a float dtype dlfuse knows")
    t = Tensor.empty(a.shape, name, device, registry=registry)
    if t.nbytes:
        _check(t._reg._lib.dlfuse_device_copy(t._reg.handle, t._device, C.COPY_HOST_TO_DEVICE,
                                              t._ptr, 0, a.ctypes.data, 0, t.nbytes,
                                              _stream_ptr(stream)))
    return t


def kernel_takes_out_form(device_type, dtype):
    """Whether the kernel add_mul_activation_backward resolves to for (device type name,
    dtype; a name or any dtype object whose str ends in it) takes `out` (ABI 1.1)."""
    dl = _DTYPE_BY_NAME.get(str(dtype).rsplit(".", 1)[-1])
    dev = C.DEVICE_TYPES.get(device_type)
    if dl is None or dev is None or abi_version() < (1, 1):
        return False
    reg = registry()
    lib = C.lib()
    op, idx = ctypes.c_void_p(), ctypes.c_int32()
    if (lib.dlfuse_op_get(reg.handle, b"add_mul_activation_backward", ctypes.byref(op)) or
            lib.dlfuse_op_resolve(op, dev, C.DLDataType(dl[0], dl[1], 1), ctypes.byref(idx))):
        return False  # no kernel: the forward fails anyway
    ki = C.dlfuse_kernel_info_t()
    for k in range(reg.plugin(idx.value).num_kernels):
        ki.struct_size = ctypes.sizeof(ki)
        if lib.dlfuse_registry_kernel_info(reg.handle, idx.value, k, ctypes.byref(ki)):
            continue
        if (ki.op == b"add_mul_activation_backward" and ki.device_type == dev and
                any((d.code, d.bits) == dl for d in ki.dtypes[:ki.num_dtypes])):
            return bool(ki.flags & C.KERNEL_TAKES_V1_1_INPUTS)
    return False


# ---- the ops (compiled) ---------------------------------------------------------------------


def _act(activation):
    if isinstance(activation, str):
        try:
            return C.ACTIVATIONS[activation]
        except KeyError:
            raise ValueError(f"dlfuse: activation must be one of {sorted(C.ACTIVATIONS)}, "
                             f"got {activation!r}") from None
    return int(activation)


_ERROR_BY_STATUS = (Error, InvalidArgumentError, UnsupportedError, NotFoundError,
                    AbiMismatchError, LoadFailedError, UnavailableError, OutOfMemoryError,
                    DeviceError, InternalError)


def _load_ext():
    """Run by the extension on its first call: the library ctypes found, shared."""
    C.lib()
    _ext.load(C.library_path(), _ERROR_BY_STATUS, Tensor, _alloc_fallback, registry,
              C.ACTIVATIONS)


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
