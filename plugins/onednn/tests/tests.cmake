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
# The same with one OpenMP thread per call: the concurrency is then only between the
# calling threads, which TSan checks without any OpenMP suppression (see tsan_dnnl.supp).
add_test(NAME onednn.threads_cache_serial COMMAND onednn_threads_test $<TARGET_FILE:dlfuse_onednn>)
set_tests_properties(onednn.threads_cache onednn.threads_cache_serial PROPERTIES LABELS "onednn")
list(APPEND _onednn_tests onednn.threads_cache)

# Sanitizers and oneDNN's OpenMP runtime (libgomp); docs/onednn.md has the long form.
# TSan: libgomp and libdnnl are not instrumented, so TSan cannot see their barriers and
# internal locks; tests/tsan.supp drops reports with a frame in those two libraries (and
# glibc's dynamic-TLS reuse). history_size=7 keeps old stacks restorable, so a report is
# matched against its real frames instead of "failed to restore the stack".
set(_serial_env "OMP_NUM_THREADS=1")
if(DLFUSE_SANITIZE MATCHES "thread")
  set(_tsan "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=7")
  set_tests_properties(${_onednn_tests} PROPERTIES ENVIRONMENT
    "${_tsan}:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/tsan.supp")
  list(APPEND _serial_env "${_tsan}:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/tsan_dnnl.supp")
elseif(DLFUSE_SANITIZE MATCHES "address")
  # Where libgomp's worker pool is alive at exit (the conformance runner calls from its
  # main thread), GCC 12's LSan crashes reading their TLS: those runs scan no TLS
  # (use_tls=0, which can only add reports) and suppress the glibc records rooted only
  # there (tests/lsan.supp). The threads tests end their calling threads before exit and
  # keep LSan's defaults.
  set_tests_properties(conform.onednn.float32 conform.onednn.bfloat16 conform.onednn.float16 PROPERTIES ENVIRONMENT
    "LSAN_OPTIONS=use_tls=0:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/lsan.supp")
endif()
set_tests_properties(onednn.threads_cache_serial PROPERTIES ENVIRONMENT "${_serial_env}")
