# `cmake --install` -> find_package(kvq) with namespaced targets kvq::core, kvq::io, kvq::layouts
# and the kvq_add_backend() helper, so an out-of-tree plugin builds exactly like an in-tree one.
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

# kvq.pc for pkg-config users (examples/host_app builds with it too). Relocatable: the paths are
# relative to the .pc file's folder, so `cmake --install --prefix P` anywhere gives a working file.
function(kvq_pc_path out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(KVQ_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH kvq_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" kvq_pc_up "${kvq_pc_up}")
  set(KVQ_PC_PREFIX "\${pcfiledir}/${kvq_pc_up}")
endif()
kvq_pc_path(KVQ_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
kvq_pc_path(KVQ_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
kvq_pc_path(KVQ_PC_CONFIGDIR "${CMAKE_INSTALL_DATADIR}/kvq/configs")
# Header folders outside the compiler's default ones (dlpack, Boost), as -I flags.
set(KVQ_PC_EXTRA_CFLAGS "")
foreach(dir ${DLPACK_INCLUDE_DIR} ${Boost_INCLUDE_DIRS})
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES AND NOT dir STREQUAL "/usr/include")
    string(APPEND KVQ_PC_EXTRA_CFLAGS " -I${dir}")
  endif()
endforeach()
list(REMOVE_DUPLICATES KVQ_PC_EXTRA_CFLAGS)
set(CMAKE_DL_LIBS_FLAG "")
if(CMAKE_DL_LIBS)
  set(CMAKE_DL_LIBS_FLAG "-l${CMAKE_DL_LIBS}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvq.pc.in ${PROJECT_BINARY_DIR}/kvq.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kvq.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
