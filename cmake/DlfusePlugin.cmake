# dlfuse_add_plugin(<name> SOURCES ... [OUTPUT_DIR dir] [INSTALL_DIR dir] [NO_INSTALL]
#                   [EXPORTS symbol...])
#
# Builds libdlfuse_<name>.so: a MODULE (it is dlopen()ed, never linked) against the
# plugin SDK only (headers, hidden visibility), whose only dynamic symbol is
# dlfuse_plugin_v1: the linker version script dlfuse_plugin.map beside this file hides
# everything else, C++ standard-library template instances and static libraries' symbols
# included. Used by the first-party plugins in this tree and, through find_package(dlfuse),
# by third parties.
#   OUTPUT_DIR   where the build puts it; in this tree, the plugin folder that libdlfuse
#                searches by default.
#   INSTALL_DIR  where `cmake --install` puts it; default lib/dlfuse/plugins under the
#                installing project's prefix (DLFUSE_PLUGIN_DIR is the one the installed
#                libdlfuse searches itself).
#   EXPORTS      further C symbols to keep exported beside dlfuse_plugin_v1 (test hooks a
#                test reaches with dlsym; a plugin the registry loads needs none).

# The version script beside this file, found when the file is included (a function
# cannot see its own file's folder before CMake 3.17).
set_property(GLOBAL PROPERTY DLFUSE_PLUGIN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/dlfuse_plugin.map)

function(dlfuse_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR;INSTALL_DIR" "SOURCES;EXPORTS" ${ARGN})
  if(NOT P_SOURCES)
    message(FATAL_ERROR "dlfuse_add_plugin(${name}): SOURCES is empty; expected the plugin's source files")
  endif()
  if(NOT name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "dlfuse_add_plugin(${name}): expected a name of [a-z0-9_] (the registry refuses others)")
  endif()
  set(target dlfuse_${name})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE dlfuse::plugin_sdk)
  if(NOT P_OUTPUT_DIR AND DLFUSE_PLUGIN_OUTPUT_DIR)
    set(P_OUTPUT_DIR ${DLFUSE_PLUGIN_OUTPUT_DIR})
  endif()
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME dlfuse_${name}
                        C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                        CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(APPLE)
    target_link_options(${target} PRIVATE "LINKER:-exported_symbol,_dlfuse_plugin_v1")
  elseif(NOT WIN32)
    get_property(map GLOBAL PROPERTY DLFUSE_PLUGIN_VERSION_SCRIPT)
    if(P_EXPORTS)
      list(JOIN P_EXPORTS "; " extra)
      set(map ${CMAKE_CURRENT_BINARY_DIR}/dlfuse_${name}.map)
      file(WRITE ${map} "{\n  global: dlfuse_plugin_v1; ${extra};\n  local: *;\n};\n")
    endif()
    target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
  endif()
  if(P_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
  endif()
  if(NOT P_NO_INSTALL)
    if(NOT P_INSTALL_DIR)
      set(P_INSTALL_DIR ${DLFUSE_PLUGIN_INSTALL_DIR})
    endif()
    if(NOT P_INSTALL_DIR)
      set(P_INSTALL_DIR lib/dlfuse/plugins)
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION ${P_INSTALL_DIR})
  endif()
endfunction()
