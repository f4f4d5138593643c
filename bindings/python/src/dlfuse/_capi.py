"""ctypes declarations of DLPack 1.x and of dlfuse's C ABI (abi/include/dlfuse/*.h), for
what is not per call: finding and loading libdlfuse, the registry's admin calls and
dlfuse.Tensor's device memory and DLPack export. The ops go through dlfuse._ext.

Layouts here mirror the C headers field for field; ``struct_size`` comes first in every
dlfuse struct that has one and is set to ``ctypes.sizeof`` of *our* declaration, which is
what the ABI asks of a writer.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from ctypes import (POINTER, Structure, Union, c_char_p, c_double, c_int32, c_int64, c_size_t,
                    c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

# ---- DLPack 1.x -----------------------------------------------------------------------

kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLOpenCL = 4
kDLVulkan = 7
kDLMetal = 8
kDLROCM = 10
kDLCUDAManaged = 13
kDLOneAPI = 14
kDLWebGPU = 15

kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4

DLPACK_FLAG_BITMASK_READ_ONLY = 1 << 0
DLPACK_FLAG_BITMASK_IS_COPIED = 1 << 1

DEVICE_NAMES = {kDLCPU: "cpu", kDLCUDA: "cuda", kDLCUDAHost: "cuda_host", kDLOpenCL: "opencl",
                kDLVulkan: "vulkan", kDLMetal: "metal", kDLROCM: "rocm",
                kDLCUDAManaged: "cuda_managed", kDLOneAPI: "oneapi", kDLWebGPU: "webgpu"}
DEVICE_TYPES = {v: k for k, v in DEVICE_NAMES.items()}


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensorDeleter = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", DLManagedTensorDeleter)]


class DLManagedTensorVersioned(Structure):
    pass


DLManagedTensorVersionedDeleter = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p),
                                     ("deleter", DLManagedTensorVersionedDeleter),
                                     ("flags", c_uint64), ("dl_tensor", DLTensor)]


# ---- dlfuse (types.h, dlfuse.h) ----------------------------------------------------------

STATUS_OK = 0
STATUS_NAMES = {0: "OK", 1: "INVALID_ARGUMENT", 2: "UNSUPPORTED", 3: "NOT_FOUND",
                4: "ABI_MISMATCH", 5: "LOAD_FAILED", 6: "UNAVAILABLE", 7: "OUT_OF_MEMORY",
                8: "DEVICE_ERROR", 9: "INTERNAL"}

ACTIVATIONS = {"identity": 0, "relu": 1, "sigmoid": 2, "tanh": 3, "gelu": 4, "gelu_erf": 4,
               "gelu_tanh": 5, "silu": 6}
ACT_COUNT = 7  # DLFUSE_ACT_COUNT

ATTR_ACTIVATION = 1
ATTR_MULTIPLIER = 2
ATTR_ALLOW_TF32 = 3
ATTR_INT64 = 1
ATTR_FLOAT64 = 2

DISCOVER_NONE = 0
DISCOVER_ENV = 1
DISCOVER_INSTALL_DIR = 2
DISCOVER_DEFAULT = 3

COPY_HOST_TO_DEVICE = 1
COPY_DEVICE_TO_HOST = 2
COPY_DEVICE_TO_DEVICE = 3


class _AttrValue(Union):
    _fields_ = [("i64", c_int64), ("f64", c_double)]


class dlfuse_attr_t(Structure):
    _fields_ = [("key", c_int32), ("type", c_int32), ("value", _AttrValue)]


class dlfuse_registry_options_t(Structure):
    _fields_ = [("struct_size", c_size_t), ("discovery", c_uint32), ("plugin_paths", c_char_p)]


class dlfuse_plugin_info_t(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("version", c_char_p),
                ("path", c_char_p), ("available", c_int32), ("reason", c_char_p),
                ("device_type", c_int32), ("device_count", c_int32), ("abi_major", c_uint32),
                ("abi_minor", c_uint32), ("num_kernels", c_int32)]


class dlfuse_kernel_info_t(Structure):
    _fields_ = [("struct_size", c_size_t), ("op", c_char_p), ("device_type", c_int32),
                ("num_dtypes", c_int32), ("dtypes", POINTER(DLDataType)), ("priority", c_int32),
                ("flags", c_uint32)]  # ABI 1.1 (a 1.0 libdlfuse leaves it 0)


KERNEL_TAKES_V1_1_INPUTS = 1  # dlfuse/plugin.h: the kernel reads ABI 1.1's appended inputs


# ---- finding and loading libdlfuse ------------------------------------------------------

class LibraryNotFound(OSError):
    """libdlfuse.so could not be found; raised on first use, never at import."""


def _candidates():
    env = os.environ.get("DLFUSE_LIBRARY")
    if env:
        return [("$DLFUSE_LIBRARY", env)]
    # A wheel carries its own build: dlfuse/lib/libdlfuse.so, plugins in lib/dlfuse/plugins.
    out = [("the package", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib",
                                        "libdlfuse.so"))]
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, "/usr/local", "/usr"]):
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            out.append((f"prefix {prefix}", os.path.join(prefix, libdir, "libdlfuse.so")))
    found = ctypes.util.find_library("dlfuse")
    if found:
        out.append(("ctypes.util.find_library", found))
    return out


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _declare(lib):
    st = c_int32  # dlfuse_status_t
    vp = c_void_p
    sigs = {
        "dlfuse_abi_version": (None, [POINTER(c_uint32), POINTER(c_uint32)]),
        "dlfuse_last_error": (c_char_p, []),
        "dlfuse_status_string": (c_char_p, [c_int32]),
        "dlfuse_registry_create": (st, [POINTER(dlfuse_registry_options_t), POINTER(vp)]),
        "dlfuse_registry_destroy": (None, [vp]),
        "dlfuse_registry_load": (st, [vp, c_char_p, POINTER(c_int32)]),
        "dlfuse_registry_plugin_count": (st, [vp, POINTER(c_int32)]),
        "dlfuse_registry_plugin_info": (st, [vp, c_int32, POINTER(dlfuse_plugin_info_t)]),
        "dlfuse_registry_kernel_info": (st, [vp, c_int32, c_int32, POINTER(dlfuse_kernel_info_t)]),
        "dlfuse_registry_prefer": (st, [vp, c_char_p, c_char_p]),
        "dlfuse_op_get": (st, [vp, c_char_p, POINTER(vp)]),
        "dlfuse_op_call": (st, [vp, vp, c_int32, vp, c_int32, vp, c_int32, vp]),
        "dlfuse_op_resolve": (st, [vp, c_int32, DLDataType, POINTER(c_int32)]),
        "dlfuse_device_count": (st, [vp, c_int32, POINTER(c_int32)]),
        "dlfuse_device_alloc": (st, [vp, DLDevice, c_size_t, POINTER(vp)]),
        "dlfuse_device_free": (st, [vp, DLDevice, vp]),
        "dlfuse_device_copy": (st, [vp, DLDevice, c_int32, vp, c_size_t, vp, c_size_t, c_size_t,
                                    vp]),
        "dlfuse_device_synchronize": (st, [vp, DLDevice, vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def lib():
    """The loaded libdlfuse (ctypes.CDLL), loading it on first use."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} ({how}): no such file")
                continue
            try:
                cand = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({how}): {e}")
                continue
            try:
                _declare(cand)
            except AttributeError as e:
                tried.append(f"{path} ({how}): not libdlfuse ({e})")
                continue
            _lib_path = path
            _lib = cand
            return _lib
        raise LibraryNotFound(
            "dlfuse: libdlfuse.so not found. Set DLFUSE_LIBRARY to its path (e.g. "
            "build/<preset>/lib/libdlfuse.so) or install dlfuse into a prefix. Tried: "
            + ("; ".join(tried) if tried else "nothing"))


def library_path():
    lib()
    return _lib_path
