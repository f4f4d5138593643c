# cmake -DCLI=... -DPLUGIN=... -P quiet_stderr.cmake
# Passes when loading the WebGPU plugin and calling it writes nothing on stderr, where no
# desktop login set XDG_RUNTIME_DIR: a library must not write to its host's stderr unasked.
# Three processes, each loading the plugin afresh: `dlfuse conform` of one op (the plugin
# alone, its threads stage included), then what a user runs, `dlfuse list` and `dlfuse run
# all` on it (these also load the other plugins of <libdir>/dlfuse/plugins).
# The variables that steer Mesa's device-select layer or make the plugin talk are cleared,
# so that the run sees what a plain process sees. The plugin must be available and its
# calls must pass: an unavailable plugin is silent without proving anything.
set(clean_env ${CMAKE_COMMAND} -E env --unset=XDG_RUNTIME_DIR --unset=WAYLAND_DISPLAY --unset=WAYLAND_SOCKET
              --unset=NODEVICE_SELECT --unset=MESA_VK_DEVICE_SELECT --unset=DRI_PRIME --unset=VK_LOADER_DEBUG
              --unset=DLFUSE_WEBGPU_VERBOSE)
foreach(step IN ITEMS conform list run)
  if(step STREQUAL "conform")
    set(args conform ${PLUGIN} --op add_mul_activation_backward --sweep 8 --repeat 1)
    set(want "\n[1-9][0-9]* passed, 0 failed")
  elseif(step STREQUAL "list")
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
message(STATUS "conform, list and run all: nothing on stderr")
