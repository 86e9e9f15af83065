# examples/host_app, built out of tree against `cmake --install` output (label plugin): once with
# find_package(kvq) and once with pkg-config and plain g++, each run on the installed
# reference_cpu config and on a copy whose log.level is debug (the host applies it).
add_test(NAME plugin_host_app_install
  COMMAND ${CMAKE_COMMAND}
    -DKVQ_BUILD_DIR=${PROJECT_BINARY_DIR} -DKVQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DWORK_DIR=${PROJECT_BINARY_DIR}/host-app-test -DGENERATOR=${CMAKE_GENERATOR}
    -DCXX_COMPILER=${CMAKE_CXX_COMPILER} -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/run_host_app.cmake)
set_tests_properties(plugin_host_app_install PROPERTIES LABELS plugin TIMEOUT 600)
