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

# bf16/f16 add_mul runs in blocks of rows (add_mul.cpp); blocks of 7 elements cut every
# conformance case, so the block seams, broadcast inputs and summed gradients are checked.
foreach(_dt bfloat16 float16)
  foreach(_op add_mul_activation add_mul_activation_backward)
    add_test(NAME conform.onednn.${_dt}.${_op}.blocks
             COMMAND $<TARGET_FILE:dlfuse_cli> conform $<TARGET_FILE:dlfuse_onednn> --dtype ${_dt} --op ${_op})
    set_tests_properties(conform.onednn.${_dt}.${_op}.blocks PROPERTIES
      LABELS "conformance;onednn" ENVIRONMENT "DLFUSE_ONEDNN_BLOCK_ELEMS=7")
  endforeach()
endforeach()

add_executable(onednn_threads_test ${CMAKE_CURRENT_SOURCE_DIR}/tests/threads_test.cpp)
target_link_libraries(onednn_threads_test PRIVATE dlfuse::dlfuse Threads::Threads)
target_compile_options(onednn_threads_test PRIVATE -Wall -Wextra)
add_test(NAME onednn.threads_cache COMMAND onednn_threads_test $<TARGET_FILE:dlfuse_onednn>)
set_tests_properties(onednn.threads_cache PROPERTIES LABELS "onednn")

# Sanitizer builds run each call on the calling thread (DLFUSE_ONEDNN_SERIAL, see
# run_kernel in common.h), so neither TSan nor LSan meets libgomp's worker threads.
# TSan still needs oneDNN's own internals suppressed (tests/tsan.supp, docs/onednn.md);
# history_size=7 keeps old stacks restorable so reports are matched on their real frames.
if(DLFUSE_SANITIZE MATCHES "thread")
  set_tests_properties(onednn.threads_cache PROPERTIES ENVIRONMENT
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/tsan.supp")
endif()
