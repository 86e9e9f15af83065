# Helpers shared by every room: warnings, backend plugins, tests.

# kvq_set_warnings(TARGET): the project's warning set; errors with KVQ_WERROR (CI sets it).
function(kvq_set_warnings target)
  set(cxx_flags -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(KVQ_WERROR)
    list(APPEND cxx_flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>)
  if(KVQ_HAVE_CUDA)
    set(cuda_flags -Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr)
    if(KVQ_WERROR)
      list(APPEND cuda_flags -Werror=all-warnings)
    endif()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>)
  endif()
  if(KVQ_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# kvq_add_backend(NAME SOURCES... [LINK libs...])
# A backend plugin: a MODULE library in lib/kvq/plugins, hidden visibility, exporting only
# kvq_plugin_entry (kvq/abi/plugin.h), found beside libkvq_core at run time (RPATH $ORIGIN/../..).
# It sees the C boundary (kvq::abi); LINK adds what its own code uses (kvq's in-tree backends link
# kvq::core and kvq::layouts through their implementation libraries).
function(kvq_add_backend name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINK" ${ARGN})
  set(target kvq_backend_${name})
  add_library(${target} MODULE ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE kvq::abi ${ARG_LINK})
  set_target_properties(${target} PROPERTIES
    PREFIX "libkvq_"
    OUTPUT_NAME "${name}"
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib/${KVQ_PLUGIN_SUBDIR}
    INSTALL_RPATH "$ORIGIN/../.."
    BUILD_RPATH "$ORIGIN/../..")
  kvq_set_warnings(${target})
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/${KVQ_PLUGIN_SUBDIR})
endfunction()

# kvq_add_test(NAME LABEL unit|plugin|gpu SOURCES... [LINK libs...] [TIMEOUT s])
# One GoogleTest binary in bin/, registered with ctest under LABEL; tests/support (helpers
# shared by several test folders) is on its include path.
function(kvq_add_test name)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "SOURCES;LINK" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main ${ARG_LINK})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  kvq_set_warnings(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "KVQ_SOURCE_DIR=${PROJECT_SOURCE_DIR};KVQ_BUILD_DIR=${PROJECT_BINARY_DIR}")
endfunction()
