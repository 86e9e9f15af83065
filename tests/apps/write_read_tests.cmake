# kvq write / kvq read (issue 5). Included from tests/apps/CMakeLists.txt.
# plugin: the commands end to end with the reference_cpu plugin (round trip, --cache, metadata,
# exit statuses); it also links the reference writer to compare the bytes in-process.
kvq_add_test(kvq_write_read_cli_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/write_read_cli_test.cpp
  LINK kvq_reference_cpu_impl)
add_dependencies(kvq_write_read_cli_tests kvq kvq_backend_reference_cpu)
