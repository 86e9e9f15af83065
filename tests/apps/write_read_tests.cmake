# kvq write / kvq read (issue 5). Included from tests/apps/CMakeLists.txt.
# plugin: the commands end to end with the reference_cpu plugin (round trip, --cache, metadata,
# exit statuses); it also links the reference writer to compare the bytes in-process.
kvq_add_test(kvq_write_read_cli_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/write_read_cli_test.cpp
  LINK kvq_reference_cpu_impl kvq::io)
# This machine's folders; KVQ_BUILD_DIR / KVQ_SOURCE_DIR in the environment override them
# (tests/apps/kvq_cli_fixture.h).
target_compile_definitions(kvq_write_read_cli_tests PRIVATE
  KVQ_BUILD_DIR_DEFAULT="${PROJECT_BINARY_DIR}" KVQ_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
add_dependencies(kvq_write_read_cli_tests kvq kvq_backend_reference_cpu)

# unit: the staging of `kvq write`/`kvq read` between host and device, on a fake runtime.
kvq_add_test(kvq_staging_unit_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_staging_test.cpp
          ${PROJECT_SOURCE_DIR}/apps/kvq/tensor_staging.cpp
  LINK kvq::core fmt::fmt)
target_include_directories(kvq_staging_unit_tests PRIVATE ${PROJECT_SOURCE_DIR}/apps/kvq)

# kvq attend (issue 49): end to end with reference_cpu, against the reference in-process.
kvq_add_test(kvq_attend_cli_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/attend_cli_test.cpp
  LINK kvq_reference_cpu_impl kvq::io)
target_compile_definitions(kvq_attend_cli_tests PRIVATE
  KVQ_BUILD_DIR_DEFAULT="${PROJECT_BINARY_DIR}" KVQ_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
add_dependencies(kvq_attend_cli_tests kvq kvq_backend_reference_cpu)
