# dlfuse_add_plugin(<name> SOURCES ... [OUTPUT_DIR dir] [NO_INSTALL])
# Builds libdlfuse_<name>.so against the public headers only; by default into the
# plugin folder that the registry searches relative to libdlfuse.
function(dlfuse_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR" "SOURCES" ${ARGN})
  set(target dlfuse_${name})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE dlfuse::headers)
  if(NOT P_OUTPUT_DIR)
    set(P_OUTPUT_DIR ${DLFUSE_PLUGIN_OUTPUT_DIR})
  endif()
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME dlfuse_${name}
                        LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
  # A plugin must not resolve against symbols of whoever loads it.
  target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${DLFUSE_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
