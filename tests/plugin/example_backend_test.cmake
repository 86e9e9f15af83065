# examples/custom_backend, built out of tree against `cmake --install` output (label plugin):
# plugin_example_backend_install builds and installs it and checks `kvq backends` lists it;
# plugin_example_backend_test then selects it by name through the registry and writes with it.
set(KVQ_EXAMPLE_WORK_DIR ${PROJECT_BINARY_DIR}/example-backend-test)
add_test(NAME plugin_example_backend_install
  COMMAND ${CMAKE_COMMAND}
    -DKVQ_BUILD_DIR=${PROJECT_BINARY_DIR} -DKVQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DWORK_DIR=${KVQ_EXAMPLE_WORK_DIR} -DGENERATOR=${CMAKE_GENERATOR}
    -DCXX_COMPILER=${CMAKE_CXX_COMPILER} -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/run_example_backend.cmake)
set_tests_properties(plugin_example_backend_install PROPERTIES LABELS plugin TIMEOUT 300
  FIXTURES_SETUP kvq_example_backend)

kvq_add_test(plugin_example_backend_test LABEL plugin TIMEOUT 60
  SOURCES example_backend_test.cpp LINK kvq::core kvq::layouts)
target_compile_definitions(plugin_example_backend_test PRIVATE
  KVQ_EXAMPLE_PLUGIN_DIR="${KVQ_EXAMPLE_WORK_DIR}/plugin-prefix/lib/kvq/plugins")
set_tests_properties(plugin_example_backend_test PROPERTIES FIXTURES_REQUIRED kvq_example_backend)
