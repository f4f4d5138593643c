# cmake "-DLISTER=cuobjdump|python3;list_device_code.py" -DPLUGIN=libdlfuse_cuda.so
#       -DARCHS="75-real;...;120" -P device_code.cmake
# The plugin must hold exactly the device code CMAKE_CUDA_ARCHITECTURES asked for: machine
# code (ELF) for every N and N-real, PTX for every N and N-virtual. A GPU whose
# architecture is missing here gets cudaErrorNoKernelImageForDevice at open().
# Architectures compare by number (90a counts as 90: list_device_code.py does not read
# the a/f flags).
execute_process(COMMAND ${LISTER} --list-elf ${PLUGIN} RESULT_VARIABLE rc1 OUTPUT_VARIABLE elf ERROR_VARIABLE e1)
execute_process(COMMAND ${LISTER} --list-ptx ${PLUGIN} RESULT_VARIABLE rc2 OUTPUT_VARIABLE ptx ERROR_VARIABLE e2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "${LISTER} failed on ${PLUGIN}:\n${e1}\n${e2}")
endif()
string(REGEX MATCHALL "\\.sm_[0-9]+[af]?\\." got_elf "${elf}")
string(REGEX MATCHALL "\\.sm_[0-9]+[af]?\\." got_ptx "${ptx}")
list(TRANSFORM got_elf REPLACE "^\\.sm_([0-9]+)[af]?\\.$" "\\1")
list(TRANSFORM got_ptx REPLACE "^\\.sm_([0-9]+)[af]?\\.$" "\\1")
list(REMOVE_DUPLICATES got_elf)
list(REMOVE_DUPLICATES got_ptx)
set(want_elf "")
set(want_ptx "")
foreach(a IN LISTS ARCHS)
  if(a MATCHES "^([0-9]+)[af]?-real$")
    list(APPEND want_elf ${CMAKE_MATCH_1})
  elseif(a MATCHES "^([0-9]+)[af]?-virtual$")
    list(APPEND want_ptx ${CMAKE_MATCH_1})
  elseif(a MATCHES "^([0-9]+)[af]?$")
    list(APPEND want_elf ${CMAKE_MATCH_1})
    list(APPEND want_ptx ${CMAKE_MATCH_1})
  else()
    message(STATUS "CMAKE_CUDA_ARCHITECTURES=${ARCHS}: '${a}' names no fixed architecture; not checked")
    return()
  endif()
endforeach()
foreach(kind elf ptx)
  list(SORT want_${kind} COMPARE NATURAL)
  list(SORT got_${kind} COMPARE NATURAL)
  if(NOT "${want_${kind}}" STREQUAL "${got_${kind}}")
    message(FATAL_ERROR "${PLUGIN}: ${kind} device code for [${got_${kind}}], expected [${want_${kind}}] "
                        "(CMAKE_CUDA_ARCHITECTURES=${ARCHS})\n--list-elf:\n${elf}\n--list-ptx:\n${ptx}")
  endif()
  message(STATUS "${kind}: ${got_${kind}} (listed by ${LISTER})")
endforeach()
