# The CUDA plugin's default target architectures: every NVIDIA GPU generation in use, so the
# plugin runs wherever the driver does. Included before enable_language(CUDA); a
# CMAKE_CUDA_ARCHITECTURES given by the user (-D, preset, cache) wins, e.g. `90` or `native`
# for a single-architecture build while developing (docs/cuda.md).
#
# Default: SASS for sm_75 (Turing), 80 (A100), 86 (Ampere consumer, and Ada), 90 (Hopper),
# 100 (Blackwell datacenter), 120 (Blackwell consumer), each of them the toolkit knows, and
# PTX of the newest so later GPUs can JIT it. SASS of X.y also runs on X.z, z >= y (sm_86
# covers 8.7/8.8/8.9, sm_100 covers 10.3, sm_120 covers 12.1): no kernel here uses what sm_89
# adds (FP8 tensor cores), so its own SASS would be a seventh compile of the same code.
set(DLFUSE_CUDA_DEFAULT_ARCHS 75 80 86 90 100 120)

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(_known "")
  if(CMAKE_CUDA_COMPILER)
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code OUTPUT_VARIABLE _codes
                    RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0)
      string(REGEX MATCHALL "sm_[0-9]+" _known "${_codes}")
    endif()
  endif()
  set(_archs "")
  set(_dropped "")
  foreach(a IN LISTS DLFUSE_CUDA_DEFAULT_ARCHS)
    if(NOT _known OR "sm_${a}" IN_LIST _known)
      list(APPEND _archs ${a})
    else()
      list(APPEND _dropped ${a})
    endif()
  endforeach()
  if(NOT _archs)
    list(JOIN DLFUSE_CUDA_DEFAULT_ARCHS ", " _all)
    message(FATAL_ERROR "${CMAKE_CUDA_COMPILER} builds none of the architectures ${_all}; "
                        "set CMAKE_CUDA_ARCHITECTURES")
  endif()
  if(_dropped)
    list(TRANSFORM _dropped PREPEND "sm_")
    list(JOIN _dropped ", " _dropped)
    message(STATUS "dlfuse: this CUDA toolkit cannot build ${_dropped}: no machine code for them "
                   "(the PTX of the newest architecture built may still JIT there)")
  endif()
  list(POP_BACK _archs _newest)
  list(TRANSFORM _archs APPEND "-real")
  list(APPEND _archs ${_newest})  # SASS + PTX
  set(CMAKE_CUDA_ARCHITECTURES "${_archs}" CACHE STRING
      "CUDA architectures of the CUDA plugin (default: every generation from sm_75; e.g. 90 or native for one)")
endif()
