# cmake -DCLI=... -DPLUGIN=... -P quiet_stderr.cmake
# Passes when loading the WebGPU plugin and running every op on it (`dlfuse list`, then
# `dlfuse run all`, each loading the plugin afresh) writes nothing on stderr, where no
# desktop session set XDG_RUNTIME_DIR: a library must not write to its host's stderr unasked.
# The variables that steer Mesa's device-select layer or make the plugin talk are cleared,
# so that the run sees what a plain process sees. The plugin must be available and its
# calls must pass: an unavailable plugin is silent without proving anything.
set(clean_env ${CMAKE_COMMAND} -E env --unset=XDG_RUNTIME_DIR --unset=WAYLAND_DISPLAY --unset=WAYLAND_SOCKET
              --unset=NODEVICE_SELECT --unset=MESA_VK_DEVICE_SELECT --unset=DRI_PRIME --unset=VK_LOADER_DEBUG
              --unset=DLFUSE_WEBGPU_VERBOSE)
foreach(step IN ITEMS list run)
  if(step STREQUAL "list")
    set(args list --plugin ${PLUGIN})
    set(want "\nwebgpu +[^ ]+ +available ")
  else()
    set(args run all --plugin ${PLUGIN})
    set(want "\n[1-9][0-9]* passed, 0 failed\n")
  endif()
  execute_process(COMMAND ${clean_env} ${CLI} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dlfuse ${step}: exit ${rc}\n${out}\nstderr:\n${err}")
  endif()
  if(NOT "\n${out}" MATCHES "${want}")
    message(FATAL_ERROR "dlfuse ${step}: expected output matching '${want}', got:\n${out}")
  endif()
  if(NOT err STREQUAL "")
    message(FATAL_ERROR "dlfuse ${step} wrote on stderr (expected nothing):\n${err}")
  endif()
endforeach()
message(STATUS "list and run all: nothing on stderr")
