# The conventions every kvq program shares (--help, --version, --log-level, --plugin-path, quiet
# backend auto, check resolving auto) and kvq read --compare, kvq calibrate, make_kv.py; label
# plugin: the programs run with the reference_cpu plugin. Included from tests/apps/CMakeLists.txt.
kvq_add_test(kvq_cli_conventions_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_conventions_test.cpp
  LINK kvq::io nlohmann_json::nlohmann_json)
target_compile_definitions(kvq_cli_conventions_tests PRIVATE
  KVQ_BUILD_DIR_DEFAULT="${PROJECT_BINARY_DIR}" KVQ_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
add_dependencies(kvq_cli_conventions_tests kvq kvq-demo kvq_backend_reference_cpu)
