# cmake -DCLI=... -DARGS=a|b|c [-DRC=n] [-DSTDOUT_REGEX=...] [-DSTDOUT_NOT_REGEX=...]
#       [-DSTDERR_REGEX=...] -P expect_run.cmake
# Runs the CLI once and checks both its exit code (default 0) and its output, which
# PASS_REGULAR_EXPRESSION alone cannot do (it ignores the exit code).
string(REPLACE "|" ";" args "${ARGS}")
if(NOT DEFINED RC)
  set(RC 0)
endif()
execute_process(COMMAND ${CLI} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "expected exit code ${RC}, got '${rc}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED STDOUT_REGEX AND NOT out MATCHES "${STDOUT_REGEX}")
  message(FATAL_ERROR "stdout does not match '${STDOUT_REGEX}':\n${out}\nstderr:\n${err}")
endif()
if(DEFINED STDOUT_NOT_REGEX AND out MATCHES "${STDOUT_NOT_REGEX}")
  message(FATAL_ERROR "stdout matches '${STDOUT_NOT_REGEX}', which it must not:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED STDERR_REGEX AND NOT err MATCHES "${STDERR_REGEX}")
  message(FATAL_ERROR "stderr does not match '${STDERR_REGEX}':\n${err}")
endif()
message("${out}")
