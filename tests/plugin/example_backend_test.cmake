# examples/custom_backend, built out of tree with clang against `cmake --install` output of this
# (gcc) build (label plugin, no GPU):
#   plugin_example_backend_install (run_example_backend.cmake) installs kvq, builds and installs
#     the example with clang++, proves from its compile command and its ELF file that it saw
#     kvq::abi alone (no spdlog, fmt, Boost, no kvq library), and that `kvq backends` lists it;
#   plugin_example_backend_test (example_backend_test.cpp) then loads the installed plugin by
#     name, through the registry and through the installed `kvq write`, and compares its caches
#     with reference_cpu's byte for byte.
set(KVQ_EXAMPLE_WORK_DIR ${PROJECT_BINARY_DIR}/example-backend-test)
# Another compiler than kvq's: the point of a C boundary. Debian: apt-get install clang.
find_program(KVQ_CLANGXX NAMES clang++ clang++-16 clang++-15 clang++-14
  DOC "clang++ for plugin_example_backend_install")
find_program(KVQ_READELF NAMES readelf ${CMAKE_READELF} DOC "readelf for plugin_example_backend_install")
add_test(NAME plugin_example_backend_install
  COMMAND ${CMAKE_COMMAND}
    -DKVQ_BUILD_DIR=${PROJECT_BINARY_DIR} -DKVQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DWORK_DIR=${KVQ_EXAMPLE_WORK_DIR} -DGENERATOR=${CMAKE_GENERATOR}
    -DCLANGXX=${KVQ_CLANGXX} "-DKVQ_COMPILER=${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
    -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
    -DDLPACK_DIR=${DLPACK_INCLUDE_DIR} -DREADELF=${KVQ_READELF}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/run_example_backend.cmake)
set_tests_properties(plugin_example_backend_install PROPERTIES LABELS plugin TIMEOUT 300
  FIXTURES_SETUP kvq_example_backend)

kvq_add_test(plugin_example_backend_test LABEL plugin TIMEOUT 120
  SOURCES example_backend_test.cpp LINK kvq::io)
target_compile_definitions(plugin_example_backend_test PRIVATE
  KVQ_EXAMPLE_WORK_DIR="${KVQ_EXAMPLE_WORK_DIR}"
  KVQ_BUILD_PLUGIN_DIR="${PROJECT_BINARY_DIR}/lib/${KVQ_PLUGIN_SUBDIR}")
add_dependencies(plugin_example_backend_test kvq kvq_backend_reference_cpu)
set_tests_properties(plugin_example_backend_test PROPERTIES FIXTURES_REQUIRED kvq_example_backend)
