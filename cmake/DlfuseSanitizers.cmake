# DLFUSE_SANITIZE applies to every target, plugins included, so a plugin's bug
# shows up in the same run as the registry's.
if(DLFUSE_SANITIZE)
  string(REPLACE ";" "," _dlfuse_san "${DLFUSE_SANITIZE}")
  add_compile_options(-fsanitize=${_dlfuse_san} -fno-omit-frame-pointer -fno-sanitize-recover=all -g)
  # A Debug build (the asan preset: asserts on) at -O1, as the sanitizers' docs advise: at
  # -O0 the reference plugin's loops made the suite's GEMM-sized cases take minutes.
  add_compile_options($<$<CONFIG:Debug>:-O1>)
  add_link_options(-fsanitize=${_dlfuse_san})
endif()

# The whole-suite conformance tests (conform.testref, conform.opencl, conform.webgpu) add
# these arguments, and DLFUSE_CONFORM_SANITIZED_ARGS to every other conformance run.
# Sanitized builds leave out the GEMM-sized cases (unaligned_k287*: work large enough for
# a GPU's padded-copy paths), three quarters of a CPU plugin's suite, whose host code the
# smaller unaligned cases run too; the plain build keeps them. TSan looks for data races,
# and every dtype runs the same threads (the registry's, the plugin's, the runner's threads
# stage): the TSan build checks float32 only; the plain and ASan builds keep every dtype.
set(DLFUSE_CONFORM_SANITIZED_ARGS "")
if(DLFUSE_SANITIZE)
  set(DLFUSE_CONFORM_SANITIZED_ARGS --exclude unaligned_k287)
endif()
set(DLFUSE_CONFORM_SUITE_ARGS ${DLFUSE_CONFORM_SANITIZED_ARGS})
if(DLFUSE_SANITIZE MATCHES "thread")
  list(APPEND DLFUSE_CONFORM_SUITE_ARGS --dtype float32)
endif()
