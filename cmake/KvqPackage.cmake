# `cmake --install` -> find_package(kvq) with namespaced targets kvq::core, kvq::layouts and the
# kvq_add_backend() helper, so an out-of-tree plugin builds exactly like an in-tree one.
include(CMakePackageConfigHelpers)
install(EXPORT kvqTargets NAMESPACE kvq:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvq)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvqConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvqConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvq
  PATH_VARS CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvqConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvqConfig.cmake ${PROJECT_BINARY_DIR}/kvqConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/KvqPluginHelpers.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvq)
