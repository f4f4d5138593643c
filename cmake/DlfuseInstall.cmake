# The installed SDK: a relocatable CMake package (find_package(dlfuse) -> dlfuse::dlfuse,
# dlfuse::headers, dlfuse::plugin_sdk, dlfuse_add_plugin) and a relocatable dlfuse.pc.
include(CMakePackageConfigHelpers)
set(DLFUSE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dlfuse)

install(EXPORT dlfuse-targets NAMESPACE dlfuse:: FILE dlfuseTargets.cmake
        DESTINATION ${DLFUSE_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dlfuseConfig.cmake.in
  ${CMAKE_BINARY_DIR}/sdk/dlfuseConfig.cmake
  INSTALL_DESTINATION ${DLFUSE_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR DLFUSE_PLUGIN_INSTALL_DIR CMAKE_INSTALL_BINDIR)
# Plugins are loaded by the host's libdlfuse, which accepts every minor of its major:
# a package of 0.x or 1.x satisfies a request of the same major.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sdk/dlfuseConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/sdk/dlfuseConfig.cmake ${CMAKE_BINARY_DIR}/sdk/dlfuseConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/DlfusePlugin.cmake ${CMAKE_CURRENT_LIST_DIR}/dlfuse_plugin.map
        DESTINATION ${DLFUSE_CMAKE_INSTALL_DIR})

# pkg-config: prefix found from the .pc file's own place, so `cmake --install --prefix X`
# gives a working file wherever X is.
file(RELATIVE_PATH DLFUSE_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" DLFUSE_PC_TO_PREFIX "${DLFUSE_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/dlfuse.pc.in ${CMAKE_BINARY_DIR}/sdk/dlfuse.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sdk/dlfuse.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
