# ctest registration of the OpenCL plugin (label `conformance`). In CI the only OpenCL
# device is PoCL's CPU device; on a machine with GPUs every device is checked.
set(_cli $<TARGET_FILE:dlfuse_cli>)
set(_plugin $<TARGET_FILE:dlfuse_opencl>)

# PoCL runs LLVM and its own worker threads inside the test process. Neither is built with
# our sanitizers, so their allocations that live until exit (LSan) and their unannotated
# synchronisation (TSan) are reported as ours. The suppression files name those libraries
# only (sanitizers/*.supp explains each line); every frame of dlfuse stays checked.
set(_env "")
set(_env_mod "")
if(DLFUSE_SANITIZE MATCHES "address")
  list(APPEND _env "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/sanitizers/lsan.supp")
endif()
if(DLFUSE_SANITIZE MATCHES "thread")
  # Appended to the preset's TSAN_OPTIONS rather than replacing them.
  list(APPEND _env_mod "TSAN_OPTIONS=string_append::suppressions=${CMAKE_CURRENT_SOURCE_DIR}/sanitizers/tsan.supp")
endif()
# PoCL caches compiled kernels under $HOME/.cache; keep each build's cache in the build tree.
list(APPEND _env "POCL_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/pocl-cache")

if(DLFUSE_SANITIZE MATCHES "thread")
  # Under TSan a subset: every op and dtype path with the bad-input checks, one
  # seed; the full suite runs in the plain and ASan builds.
  add_test(NAME conform.opencl COMMAND ${_cli} conform ${_plugin} --op matmul_add_relu)
  add_test(NAME conform.opencl_amx_backward COMMAND ${_cli} conform ${_plugin} --op add_mul_activation_backward)
  set(_tests conform.opencl conform.opencl_amx_backward)
else()
  # The whole suite with the device's own GEMM tuning (the CPU kernel on PoCL) ...
  add_test(NAME conform.opencl COMMAND ${_cli} conform ${_plugin})
  # ... the GPU GEMM kernel (local-memory tiles) run on the CPU device, so CI checks it too,
  # (both tile sizes; the 128-tile kernel at the float32 and float16 builds),
  add_test(NAME conform.opencl_tiled128_gemm COMMAND ${_cli} conform ${_plugin} --op matmul_add_relu --no-bad-inputs)
  add_test(NAME conform.opencl_tiled128_gemm_backward
           COMMAND ${_cli} conform ${_plugin} --op matmul_add_relu_backward --no-bad-inputs)
  add_test(NAME conform.opencl_tiled64_gemm COMMAND ${_cli} conform ${_plugin} --op matmul_add_relu --no-bad-inputs)
  add_test(NAME conform.opencl_tiled64_gemm_backward
           COMMAND ${_cli} conform ${_plugin} --op matmul_add_relu_backward --no-bad-inputs)
  set_property(TEST conform.opencl_tiled128_gemm conform.opencl_tiled128_gemm_backward APPEND PROPERTY
               ENVIRONMENT DLFUSE_OPENCL_GEMM=tiled128 DLFUSE_OPENCL_FP16=force)
  set_property(TEST conform.opencl_tiled64_gemm conform.opencl_tiled64_gemm_backward APPEND PROPERTY
               ENVIRONMENT DLFUSE_OPENCL_GEMM=tiled64)
  # ... and the float16 path, forced on (PoCL does not report cl_khr_fp16; the kernels
  # touch half data only through the core vload_half/vstore_half).
  add_test(NAME conform.opencl_fp16 COMMAND ${_cli} conform ${_plugin} --dtype float16 --no-bad-inputs)
  set_property(TEST conform.opencl_fp16 APPEND PROPERTY ENVIRONMENT DLFUSE_OPENCL_FP16=force)
  set(_tests conform.opencl conform.opencl_tiled128_gemm conform.opencl_tiled128_gemm_backward
             conform.opencl_tiled64_gemm conform.opencl_tiled64_gemm_backward conform.opencl_fp16)
endif()

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
if(_env_mod)
  set_property(TEST ${_tests} APPEND PROPERTY ENVIRONMENT_MODIFICATION ${_env_mod})
endif()
set_property(TEST ${_tests} APPEND PROPERTY LABELS conformance)
set_property(TEST ${_tests} PROPERTY TIMEOUT 300)
