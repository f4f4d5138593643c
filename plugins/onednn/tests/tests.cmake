# Tests of the oneDNN plugin (included from plugins/onednn/CMakeLists.txt when
# DLFUSE_BUILD_TESTS is ON): conformance for every declared dtype, one ctest each, fixed
# regression cases and seeds of the random sweep, and a concurrency + primitive-cache test
# through the registry.
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
    list(APPEND _onednn_tests conform.onednn.${_dt}.${_op}.blocks)
  endforeach()
endforeach()

# Regression cases the conformance suite's random sweep found in the float32 matmul (the
# only path that gives oneDNN the caller's strides; bf16/f16 convert to compact copies):
#  20250101/sweep_012: a [3,5] row-broadcast @ [1,2(stride 0),5,11], bias [1,2,3,1]: both
#                      operands broadcast along a batch dim the output keeps (no descriptor);
#  12/sweep_030:       a transposed output [1,2,3,129] with a full [1,1,3,129] bias (the bias,
#                      transposed with the output, went to the binary post-op strided);
#  1/sweep_030:        a padded [1,129,1] bias and a padded output;
#  12/sweep_037:       a per-batch row bias [2,1,17] and a padded output (oneDNN's binary
#                      post-op reads the bias by the dst element's dense offset).
# The case names pin the generator's cases; the fail regex catches a filter that ran nothing.
set(_onednn_regressions)
foreach(_sc 20250101:012 12:030 1:030 12:037)
  string(REPLACE ":" ";" _sc "${_sc}")
  list(GET _sc 0 _seed)
  list(GET _sc 1 _case)
  set(_name conform.onednn.float32.matmul_add_relu.seed${_seed}.sweep_${_case})
  add_test(NAME ${_name}
           COMMAND $<TARGET_FILE:dlfuse_cli> conform $<TARGET_FILE:dlfuse_onednn> --dtype float32
                   --op matmul_add_relu --seed ${_seed} --sweep 64 --case sweep_${_case})
  set_tests_properties(${_name} PROPERTIES LABELS "conformance;onednn" FAIL_REGULAR_EXPRESSION "(^|\n)0 passed")
  list(APPEND _onednn_tests ${_name})
endforeach()

# Twenty fixed seeds of the random sweep, every op, float32 (about 12 s in a normal build;
# sanitizer builds, some 12 times slower, take the first five).
set(_onednn_seeds "1|2|3|5|7|11|12|13|17|19|23|29|31|37|41|43|47|20250101|1234567|99991")
if(DLFUSE_SANITIZE)
  set(_onednn_seeds "1|2|3|5|7")
endif()
add_test(NAME conform.onednn.float32.sweep_seeds
         COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:dlfuse_cli> -DPLUGIN=$<TARGET_FILE:dlfuse_onednn>
                 -DDTYPE=float32 "-DSEEDS=${_onednn_seeds}" -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/conform_seeds.cmake)
set_tests_properties(conform.onednn.float32.sweep_seeds PROPERTIES LABELS "conformance;onednn" TIMEOUT 300)
list(APPEND _onednn_tests conform.onednn.float32.sweep_seeds)

add_executable(onednn_threads_test ${CMAKE_CURRENT_SOURCE_DIR}/tests/threads_test.cpp)
target_link_libraries(onednn_threads_test PRIVATE dlfuse::dlfuse Threads::Threads)
target_compile_options(onednn_threads_test PRIVATE -Wall -Wextra)
add_test(NAME onednn.threads_cache COMMAND onednn_threads_test $<TARGET_FILE:dlfuse_onednn>)
set_tests_properties(onednn.threads_cache PROPERTIES LABELS "onednn")
list(APPEND _onednn_tests onednn.threads_cache)

# Sanitizer builds run each call on the calling thread (DLFUSE_ONEDNN_SERIAL, see
# run_kernel in common.h), so neither TSan nor LSan meets libgomp's worker threads.
# TSan still needs oneDNN's own internals suppressed (tests/tsan.supp, docs/onednn.md);
# history_size=7 keeps old stacks restorable so reports are matched on their real frames.
if(DLFUSE_SANITIZE MATCHES "thread")
  set_property(TEST onednn.threads_cache APPEND PROPERTY ENVIRONMENT
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/tsan.supp")
endif()

# Idle OpenMP workers sleep instead of spinning: on a machine with few cores shared by
# parallel ctest jobs, libgomp's default spin-wait makes these tests tens of times slower.
set_property(TEST ${_onednn_tests} APPEND PROPERTY ENVIRONMENT "OMP_WAIT_POLICY=passive")
