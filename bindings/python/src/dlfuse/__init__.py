"""dlfuse: fused deep-learning ops over DLPack, through libdlfuse's C ABI.

    import numpy as np, dlfuse
    out = dlfuse.matmul_add_relu(a, b, bias)          # any __dlpack__ producer
    np.from_dlpack(out)                               # zero copy

Every op is a function whose parameters come from the op's schema (dlfuse.op_function);
an op a loaded plugin declares is dlfuse.<op> too. ``dlfuse.torch`` (imported on demand)
adds autograd Functions and torch.library ops. libdlfuse is looked up on first use:
$DLFUSE_LIBRARY (only it, when set), the package's own dlfuse/lib/libdlfuse.so (a wheel's),
<prefix>/lib/libdlfuse.so, then libdlfuse.so on the loader's path. See docs/python.md.
"""
import os as _os

# A build tree's compiled module (<build>/python/dlfuse/_ext*.so) for a package run from
# its source folder; an installed wheel has _ext next to this file.
if _os.environ.get("DLFUSE_EXT_DIR"):
    __path__.append(_os.environ["DLFUSE_EXT_DIR"])
try:
    from . import _ext  # noqa: F401
except ImportError as _e:
    raise ImportError(
        "dlfuse: the compiled module dlfuse._ext is missing or broken (" + str(_e) + "). "
        "Install the package (pip install ./bindings/python) or, for a CMake build, set "
        "DLFUSE_EXT_DIR=<build>/python/dlfuse") from _e
from ._core import (AbiMismatchError, DeviceError, Error, InternalError, InvalidArgumentError,
                    LibraryNotFound, library_path,
                    LoadFailedError, NotFoundError, OutOfMemoryError, PluginInfo, Registry,
                    Tensor, UnavailableError, UnsupportedError, abi_version, call,
                    last_error, load_plugin, op_function, op_names, plugins, registry, to_device)

from ._version import __version__  # written beside _ext by the build, from the project's version

from . import _core

# The core ops (dlfuse/ops.def, as compiled into _ext): dlfuse.<op>, the functions _core made.
for _name in _ext.core_ops():
    globals()[_name] = getattr(_core, _name)

__all__ = ["AbiMismatchError", "DeviceError", "Error", "InternalError", "InvalidArgumentError",
           "LibraryNotFound", "LoadFailedError", "NotFoundError", "OutOfMemoryError",
           "PluginInfo", "Registry", "Tensor", "UnavailableError", "UnsupportedError",
           "abi_version", "call", "last_error", "library_path", "load_plugin", "op_function",
           "op_names", "plugins", "registry", "to_device", *_ext.core_ops()]
del _name


def __getattr__(name):
    """An op a loaded plugin declares, as a function like the core ops' (dlfuse.<op>)."""
    if not name.startswith("_"):
        try:
            if name in _core.op_names():
                return op_function(name)
        except (Error, OSError):
            pass
    raise AttributeError(f"module 'dlfuse' has no attribute {name!r}")
