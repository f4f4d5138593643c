# dlfuse_add_commit_seed_conform(NAME <test> PLUGIN <target> [ALL_CASES] [ARGS <arg>...]): the
# plugin's sweep (ALL_CASES: every case) seeded by the commit under test
# (tests/conformance/commit_seed.cmake), beside its
# fixed-seed suites. Unsanitized builds only: it checks values, which the sanitizers do not
# change, and the sanitized presets run the fixed-seed suites.
function(dlfuse_add_commit_seed_conform)
  if(DLFUSE_SANITIZE)
    return()
  endif()
  cmake_parse_arguments(A "ALL_CASES" "NAME;PLUGIN" "ARGS" ${ARGN})
  string(REPLACE ";" "|" _args "${DLFUSE_CONFORM_SUITE_ARGS};${A_ARGS}")
  add_test(NAME ${A_NAME}
           COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:dlfuse_cli> -DPLUGIN=$<TARGET_FILE:${A_PLUGIN}>
                   -DSOURCE_DIR=${PROJECT_SOURCE_DIR} "-DARGS=${_args}" -DALL_CASES=${A_ALL_CASES}
                   -P ${PROJECT_SOURCE_DIR}/tests/conformance/commit_seed.cmake)
  set_tests_properties(${A_NAME} PROPERTIES LABELS conformance TIMEOUT 600)
endfunction()
