# cmake -DCLI=... -DPLUGIN=... -DDTYPE=... -DSEEDS=a|b|... [-DSWEEP=64] -P conform_seeds.cmake
# Runs `dlfuse conform PLUGIN --dtype DTYPE --seed S --sweep SWEEP` for every seed and fails
# on the first seed with a failure (or a run that checked nothing), printing its table. The
# float32 path hands the caller's strides to oneDNN as they are, so layouts only a random
# sweep meets are where it breaks; a fixed list of seeds keeps CI reproducible.
if(NOT DEFINED SWEEP)
  set(SWEEP 64)
endif()
string(REPLACE "|" ";" seeds "${SEEDS}")
foreach(seed IN LISTS seeds)
  execute_process(COMMAND ${CLI} conform ${PLUGIN} --dtype ${DTYPE} --seed ${seed} --sweep ${SWEEP} --no-bad-inputs
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "\n[1-9][0-9]* passed, 0 failed")
    message(FATAL_ERROR "conform --dtype ${DTYPE} --seed ${seed} --sweep ${SWEEP}: exit ${rc}\n${out}\n${err}")
  endif()
endforeach()
message(STATUS "${DTYPE}: seeds ${SEEDS} passed")
