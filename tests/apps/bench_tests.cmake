# kvq bench's tests (issue 7). Included from tests/apps/CMakeLists.txt.
# unit: the sweep, inputs, byte counts, runner and JSON, driven by fakes (no plugin loaded).
kvq_add_test(kvq_bench_unit_tests LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_unit_test.cpp
  LINK kvq_bench kvq::layouts)

# plugin: `kvq bench` end to end with reference_cpu (a tiny sweep, exit statuses, --plot).
kvq_add_test(kvq_bench_cli_tests LABEL plugin
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_cli_test.cpp
  LINK nlohmann_json::nlohmann_json)
# This machine's folders; KVQ_BUILD_DIR / KVQ_SOURCE_DIR in the environment override them
# (tests/apps/kvq_cli_fixture.h).
target_compile_definitions(kvq_bench_cli_tests PRIVATE
  KVQ_BUILD_DIR_DEFAULT="${PROJECT_BINARY_DIR}" KVQ_SOURCE_DIR_DEFAULT="${PROJECT_SOURCE_DIR}")
if(TARGET kvq_backend_reference_cpu)
  add_dependencies(kvq_bench_cli_tests kvq kvq_backend_reference_cpu)
endif()

# gpu: CudaDeviceRuntime from the cuda implementation library (no plugin loaded); the
# device tests skip without a GPU, the refusals run everywhere.
if(TARGET kvq_cuda_impl)
  kvq_add_test(kvq_bench_cuda_runtime_tests LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_cuda_runtime_test.cpp
    LINK kvq_cuda_impl)
endif()
