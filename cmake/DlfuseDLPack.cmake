# DLPack >= 1.0 comes from a package, never from a copy in this tree. Debian's
# libdlpack-dev is 0.6 (no DLManagedTensorVersioned), so the default source is the
# header shipped in the PyPI wheel apache-tvm-ffi; DLPACK_INCLUDE_DIR overrides.
if(NOT DLPACK_INCLUDE_DIR)
  # The python3 first on PATH is the one `python3 -m pip` (tools/setup.sh) installed into.
  find_program(DLFUSE_PYTHON3 python3)
  if(DLFUSE_PYTHON3)
    execute_process(
      COMMAND ${DLFUSE_PYTHON3} -c "import tvm_ffi.libinfo as l; print(l.find_dlpack_include_path())"
      OUTPUT_VARIABLE _dlpack_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h HINTS ${_dlpack_hint} NO_DEFAULT_PATH)
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h)
if(NOT DLPACK_INCLUDE_DIR)
  message(FATAL_ERROR "dlpack/dlpack.h (>= 1.0) not found: `python3 -m pip install apache-tvm-ffi` "
                      "or pass -DDLPACK_INCLUDE_DIR=<dir holding dlpack/dlpack.h>")
endif()
file(STRINGS ${DLPACK_INCLUDE_DIR}/dlpack/dlpack.h _dlpack_major REGEX "#define DLPACK_MAJOR_VERSION")
file(STRINGS ${DLPACK_INCLUDE_DIR}/dlpack/dlpack.h _dlpack_minor REGEX "#define DLPACK_MINOR_VERSION")
string(REGEX MATCH "[0-9]+" DLPACK_VERSION_MAJOR "${_dlpack_major}")
string(REGEX MATCH "[0-9]+" DLPACK_VERSION_MINOR "${_dlpack_minor}")
if(NOT DLPACK_VERSION_MAJOR OR DLPACK_VERSION_MAJOR LESS 1)
  message(FATAL_ERROR "${DLPACK_INCLUDE_DIR}/dlpack/dlpack.h is DLPack ${DLPACK_VERSION_MAJOR}.${DLPACK_VERSION_MINOR}; "
                      "dlfuse needs >= 1.0 (Debian's libdlpack-dev is too old: see docs/abi.md)")
endif()
message(STATUS "DLPack ${DLPACK_VERSION_MAJOR}.${DLPACK_VERSION_MINOR} from ${DLPACK_INCLUDE_DIR}")
