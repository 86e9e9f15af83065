# kvq and kvq-demo against hostile files and environments (docs/robustness.md). Included from
# tests/apps/CMakeLists.txt. plugin: the commands load the plugin registry.
kvq_add_test(kvq_hostile_cli_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hostile_cli_test.cpp)
# This machine's folders; KVQ_BUILD_DIR / KVQ_SOURCE_DIR in the environment override them
# (tests/apps/kvq_cli_fixture.h).
target_compile_definitions(kvq_hostile_cli_tests PRIVATE
  KVQ_BUILD_DIR_DEFAULT="${PROJECT_BINARY_DIR}" KVQ_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
add_dependencies(kvq_hostile_cli_tests kvq kvq-demo)
if(TARGET kvq_backend_reference_cpu)
  add_dependencies(kvq_hostile_cli_tests kvq_backend_reference_cpu)
endif()
