"""Loads dlfuse's C++ PyTorch operators (libdlfuse_torch.so, csrc/torch_ops.cpp and
csrc/torch_derived.cpp) when they were built for the running torch: then the kernels and
autograd of ``torch.ops.dlfuse.*`` are C++. Otherwise dlfuse.torch defines the same operators
in Python (torch.library), slower per call but the same results.

DLFUSE_TORCH_OPS=python forces the Python operators (a debugging and comparison aid).
"""
import ctypes
import os
import re

import torch

from . import _core, _errors, _ext

LIBRARY = "libdlfuse_torch.so"
_STATUS = re.compile(r"dlfuse status (\d+): (.*)", re.S)

why_not = None  # why the C++ operators are not in use (None when they are)
_lib = None  # the loaded library, for derive()


def _torch_version_of(path):
    try:
        with open(path + ".torch_version") as f:
            return f.read().strip()
    except OSError:
        return None


def load():
    """True when the C++ operators are registered and initialized; else why_not says why."""
    global why_not, _lib
    if os.environ.get("DLFUSE_TORCH_OPS", "") == "python":
        why_not = "DLFUSE_TORCH_OPS=python"
        return False
    path = os.path.join(os.path.dirname(os.path.abspath(_ext.__file__)), LIBRARY)
    built_for = _torch_version_of(path)
    if built_for is None:
        why_not = f"{path} (or its .torch_version) is missing: built without torch"
        return False
    if built_for != torch.__version__:
        # torch's C++ ABI changes between releases: loading it into another one could crash
        why_not = f"{LIBRARY} was built for torch {built_for}, this is {torch.__version__}"
        return False
    try:
        torch.ops.load_library(path)
        lib = ctypes.CDLL(path)
        lib.dlfuse_torch_ops_init.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_char_p)]
        lib.dlfuse_torch_ops_derive.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                ctypes.POINTER(ctypes.c_char_p)]
        why = ctypes.c_char_p()
        # libdlfuse loaded (raises LibraryNotFound with what it tried)
        if lib.dlfuse_torch_ops_init(_core.library_path().encode(), _core.registry()._h,
                                     ctypes.byref(why)) != 0:
            why_not = f"{LIBRARY}: init failed: {(why.value or b'').decode()}"
            return False
    except (OSError, RuntimeError) as e:
        why_not = f"{LIBRARY}: {e}"
        return False
    why_not = None
    _lib = lib
    return True


def derive(name, torch_schema, backward):
    """Defines torch.ops.dlfuse.<name> in C++ (csrc/torch_derived.cpp): its kernel and, with
    `backward` (an op derived before), its autograd. `torch_schema` is the schema without the
    name. Raises RuntimeError with the library's reason."""
    why = ctypes.c_char_p()
    if _lib.dlfuse_torch_ops_derive(name.encode(), torch_schema.encode(),
                                    None if backward is None else backward.encode(), ctypes.byref(why)) != 0:
        raise RuntimeError(f"dlfuse.torch: deriving {name} in C++: {(why.value or b'').decode()}")


def reraise(e):
    """A C++ operator's error as the dlfuse exception the Python operators raise."""
    m = _STATUS.search(str(e))
    if m is None:
        raise e
    status, message = int(m.group(1)), m.group(2).split("\nException raised from")[0].rstrip()
    raise _errors.error_of(status, message) from None
