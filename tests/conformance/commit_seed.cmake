# cmake -DCLI=... -DPLUGIN=... -DSOURCE_DIR=... [-DARGS=a|b] [-DALL_CASES=1] -P commit_seed.cmake
# The sweep seeded by the commit under test: `dlfuse conform PLUGIN --seed S --sweep 64
# --case sweep_ ARGS...` (ALL_CASES: every case, for a plugin of declared ops, whose checks
# are all drawn from the seed), S the first 10 hex digits of SOURCE_DIR's `git rev-parse HEAD`
# read as a number (below 2^40), or a random seed where SOURCE_DIR is no git checkout. Every
# commit so draws cases no earlier one drew; the fixed-seed suites run beside it. A failure
# prints the command that reproduces it.
set(extra)
if(DEFINED ARGS)
  string(REPLACE "|" ";" extra "${ARGS}")
endif()
set(seed random)
find_program(GIT git)
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse HEAD RESULT_VARIABLE rc OUTPUT_VARIABLE head
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head MATCHES "^[0-9a-f]+$")
    string(SUBSTRING "${head}" 0 10 hex)
    math(EXPR seed "0x${hex}")
  endif()
endif()
set(cases --case sweep_)
if(ALL_CASES)
  set(cases)
endif()
set(args --seed ${seed} --sweep 64 ${cases} --no-bad-inputs ${extra})
execute_process(COMMAND ${CLI} conform ${PLUGIN} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCH "# seed [^\n]*" header "${out}")
string(REGEX MATCH "[0-9]+ passed, [0-9]+ failed" summary "${out}")
if(NOT rc EQUAL 0)
  string(REPLACE ";" " " shown "${args}")
  message(FATAL_ERROR "${out}\n${err}\nthe commit's sweep fails; reproduce with\n"
                      "  dlfuse conform ${PLUGIN} ${shown}\nthen fix it and pin the case by name "
                      "(tests/conformance/README.md)")
endif()
message(STATUS "${header}\n${summary}")
