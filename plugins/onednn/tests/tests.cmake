# Tests of the oneDNN plugin (included from plugins/onednn/CMakeLists.txt when
# DLFUSE_BUILD_TESTS is ON): conformance for every declared dtype, one ctest each, and a
# concurrency + primitive-cache test through the registry.
set(_onednn_tests)
foreach(_dt float32 bfloat16 float16)
  add_test(NAME conform.onednn.${_dt}
           COMMAND $<TARGET_FILE:dlfuse_cli> conform $<TARGET_FILE:dlfuse_onednn> --dtype ${_dt})
  list(APPEND _onednn_tests conform.onednn.${_dt})
endforeach()
set_tests_properties(${_onednn_tests} PROPERTIES LABELS "conformance;onednn")

add_executable(onednn_threads_test ${CMAKE_CURRENT_SOURCE_DIR}/tests/threads_test.cpp)
target_link_libraries(onednn_threads_test PRIVATE dlfuse::dlfuse Threads::Threads)
target_compile_options(onednn_threads_test PRIVATE -Wall -Wextra)
add_test(NAME onednn.threads_cache COMMAND onednn_threads_test $<TARGET_FILE:dlfuse_onednn>)
set_tests_properties(onednn.threads_cache PROPERTIES LABELS "onednn")
list(APPEND _onednn_tests onednn.threads_cache)

# Sanitizers and oneDNN's OpenMP runtime (libgomp): TSan does not see libgomp's barriers
# and thread-pool hand-offs (libgomp is not built with TSan), so it reports races between
# the threads of one parallel region that are ordered by those barriers. The suppressions
# are scoped to frames inside libgomp and libdnnl; the plugin's own code, the registry and
# the test are still fully checked. See docs/onednn.md.
if(DLFUSE_SANITIZE MATCHES "thread")
  set_tests_properties(${_onednn_tests} PROPERTIES ENVIRONMENT
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/tsan.supp")
elseif(DLFUSE_SANITIZE MATCHES "address")
  # Where libgomp's worker pool is alive at exit (the conformance runner calls from its
  # main thread), GCC 12's LSan crashes reading their TLS: those runs scan no TLS
  # (use_tls=0, which can only add reports) and suppress the glibc records rooted only
  # there (tests/lsan.supp). The threads test ends its calling threads before exit and
  # keeps LSan's defaults.
  set_tests_properties(conform.onednn.float32 conform.onednn.bfloat16 conform.onednn.float16 PROPERTIES ENVIRONMENT
    "LSAN_OPTIONS=use_tls=0:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/lsan.supp")
endif()
