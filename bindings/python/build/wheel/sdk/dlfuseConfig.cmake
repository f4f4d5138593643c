# find_package(dlfuse) gives:
#   dlfuse::dlfuse      libdlfuse, for applications (the host API, dlfuse/dlfuse.h)
#   dlfuse::plugin_sdk  for plugin authors (dlfuse/plugin.h; never links libdlfuse)
#   dlfuse::headers     the public headers alone
#   dlfuse_add_plugin(<name> SOURCES ...)   builds libdlfuse_<name>.so the way the registry expects
#   DLFUSE_PLUGIN_DIR   the folder this installation's libdlfuse searches by default
#   DLFUSE_CLI          the `dlfuse` command (list, run, conform), if installed

####### Expanded from @PACKAGE_INIT@ by configure_package_config_file() #######
####### Any changes to this file will be overwritten by the next CMake run ####
####### The input file was dlfuseConfig.cmake.in                            ########

get_filename_component(PACKAGE_PREFIX_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE)

macro(set_and_check _var _file)
  set(${_var} "${_file}")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "File or directory ${_file} referenced by variable ${_var} does not exist !")
  endif()
endmacro()

macro(check_required_components _NAME)
  foreach(comp ${${_NAME}_FIND_COMPONENTS})
    if(NOT ${_NAME}_${comp}_FOUND)
      if(${_NAME}_FIND_REQUIRED_${comp})
        set(${_NAME}_FOUND FALSE)
      endif()
    endif()
  endforeach()
endmacro()

####################################################################################

include("${CMAKE_CURRENT_LIST_DIR}/dlfuseTargets.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/DlfusePlugin.cmake")

set(DLFUSE_ABI_MAJOR 1)
set(DLFUSE_ABI_MINOR 0)
set(DLFUSE_INCLUDE_DIR "${PACKAGE_PREFIX_DIR}/include")
set(DLFUSE_PLUGIN_DIR "${PACKAGE_PREFIX_DIR}/lib/dlfuse/plugins")
if(EXISTS "${PACKAGE_PREFIX_DIR}/bin/dlfuse")
  set(DLFUSE_CLI "${PACKAGE_PREFIX_DIR}/bin/dlfuse")
endif()
check_required_components(dlfuse)
