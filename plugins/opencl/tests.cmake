# ctest registration of the OpenCL plugin (label `conformance`). In CI the only OpenCL
# device is PoCL's CPU device; on a machine with GPUs every device is checked.
set(_cli $<TARGET_FILE:dlfuse_cli>)
set(_plugin $<TARGET_FILE:dlfuse_opencl>)

# PoCL runs LLVM and its own worker threads inside the test process, neither built with
# our sanitizers. Under LSan, the compiler state they keep until exit is reported as leaked:
# sanitizers/lsan.supp suppresses allocations made inside libpocl/libLLVM only (each line
# says why), so every allocation of dlfuse stays checked. TSan reports nothing with PoCL
# 3.1 (Debian bookworm), so no TSan suppression is used; the full suite runs there too.
set(_env "POCL_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/pocl-cache")  # not $HOME/.cache
if(DLFUSE_SANITIZE MATCHES "address")
  list(APPEND _env "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/sanitizers/lsan.supp")
endif()

# The whole suite with the device's own GEMM (the CPU kernel on PoCL) ...
add_test(NAME conform.opencl COMMAND ${_cli} conform ${_plugin})
# ... the GPU GEMM kernels (local-memory tiles, 128 and 64) run on the CPU device, so CI
# checks them too (their float16 build is checked on the GPU machine, docs/opencl.md), ...
add_test(NAME conform.opencl_tiled128 COMMAND ${_cli} conform ${_plugin} --no-bad-inputs)
add_test(NAME conform.opencl_tiled64 COMMAND ${_cli} conform ${_plugin} --no-bad-inputs)
set_property(TEST conform.opencl_tiled128 APPEND PROPERTY ENVIRONMENT DLFUSE_OPENCL_GEMM=tiled128)
set_property(TEST conform.opencl_tiled64 APPEND PROPERTY ENVIRONMENT DLFUSE_OPENCL_GEMM=tiled64)
# ... and the float16 path, forced on (PoCL does not report cl_khr_fp16; the kernels
# touch half data only through the core vload_half/vstore_half).
add_test(NAME conform.opencl_fp16 COMMAND ${_cli} conform ${_plugin} --dtype float16 --no-bad-inputs)
set_property(TEST conform.opencl_fp16 APPEND PROPERTY ENVIRONMENT DLFUSE_OPENCL_FP16=force)
set(_tests conform.opencl conform.opencl_tiled128 conform.opencl_tiled64 conform.opencl_fp16)

# A kernel build failure reaches the caller with the compiler's log in the message.
add_test(NAME conform.opencl_build_log
         COMMAND ${_cli} conform ${_plugin} --op add_mul_activation --no-bad-inputs)
set_tests_properties(conform.opencl_build_log PROPERTIES
  ENVIRONMENT "DLFUSE_OPENCL_BUILD_OPTIONS=-DDLF_FORCE_BUILD_ERROR"
  PASS_REGULAR_EXPRESSION "clBuildProgram[^\n]*failed: CL_BUILD_PROGRAM_FAILURE; build log:[^\n]*DLF_FORCE_BUILD_ERROR is defined")
# A selector that matches nothing leaves the plugin unavailable, with the device list.
add_test(NAME conform.opencl_bad_selector COMMAND ${_cli} conform ${_plugin})
set_tests_properties(conform.opencl_bad_selector PROPERTIES
  ENVIRONMENT "DLFUSE_OPENCL_DEVICE=no-such-device-xyz"
  PASS_REGULAR_EXPRESSION "unavailable: DLFUSE_OPENCL_DEVICE='no-such-device-xyz': selector 'no-such-device-xyz' matches no device; devices: 0 = ")
list(APPEND _tests conform.opencl_build_log conform.opencl_bad_selector)

set_property(TEST ${_tests} APPEND PROPERTY ENVIRONMENT ${_env})
set_property(TEST ${_tests} APPEND PROPERTY LABELS conformance)
set_property(TEST ${_tests} PROPERTY TIMEOUT 300)

# Many threads at once, default queue and their own queues (a stream), checked results.
add_executable(dlfuse_opencl_threads tests/threads.cpp)
target_link_libraries(dlfuse_opencl_threads PRIVATE dlfuse::dlfuse OpenCL::OpenCL)
target_compile_options(dlfuse_opencl_threads PRIVATE -Wall -Wextra)
add_test(NAME opencl.threads COMMAND dlfuse_opencl_threads ${_plugin} 6 10)
set_tests_properties(opencl.threads PROPERTIES ENVIRONMENT "${_env}" LABELS conformance TIMEOUT 300)

# Sub-buffers of one cl_mem: disjoint ones work, an output overlapping an input through
# them is refused (the registry cannot see it: the handles differ).
add_executable(dlfuse_opencl_subbuffers tests/subbuffers.cpp)
target_link_libraries(dlfuse_opencl_subbuffers PRIVATE dlfuse::dlfuse OpenCL::OpenCL)
target_compile_options(dlfuse_opencl_subbuffers PRIVATE -Wall -Wextra)
add_test(NAME opencl.subbuffers COMMAND dlfuse_opencl_subbuffers ${_plugin})
set_tests_properties(opencl.subbuffers PROPERTIES ENVIRONMENT "${_env}" LABELS conformance TIMEOUT 300)
