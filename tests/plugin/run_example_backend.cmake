# ctest -P script: the out-of-tree story end to end, as a user would do it.
#   1. cmake --install the kvq build into a prefix (no root: it is under the build folder),
#   2. configure, build and install examples/custom_backend against it (find_package(kvq)),
#   3. run the installed `kvq backends` with KVQ_PLUGIN_PATH at the installed plugin and check
#      that example_nvfp4 is listed and available, and that the installed kvq found its own
#      reference_cpu beside libkvq_core (<prefix>/lib/kvq/plugins);
#   4. run a copy of kvq from another folder whose lib/ links to the installed libkvq_core (as an
#      engine embedding kvq does): it finds the same plugins, beside the library's real file.
# Inputs (-D): KVQ_BUILD_DIR, KVQ_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

set(kvq_prefix ${WORK_DIR}/kvq-prefix)
set(example_build ${WORK_DIR}/example-build)
set(plugin_prefix ${WORK_DIR}/plugin-prefix)
file(REMOVE_RECURSE ${WORK_DIR})

run("installing kvq" ${CMAKE_COMMAND} --install ${KVQ_BUILD_DIR} --prefix ${kvq_prefix})
run("configuring the example" ${CMAKE_COMMAND} -S ${KVQ_SOURCE_DIR}/examples/custom_backend
    -B ${example_build} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_PREFIX_PATH=${kvq_prefix})
run("building the example" ${CMAKE_COMMAND} --build ${example_build})
run("installing the example" ${CMAKE_COMMAND} --install ${example_build} --prefix ${plugin_prefix})

set(plugin ${plugin_prefix}/lib/kvq/plugins/libkvq_example_nvfp4.so)
if(NOT EXISTS ${plugin})
  file(GLOB_RECURSE installed RELATIVE ${plugin_prefix} ${plugin_prefix}/*)
  message(FATAL_ERROR "expected ${plugin} after installing the example; found: ${installed}")
endif()

# It must find kvq's libraries by itself (RUNPATH), not only when a kvq host has loaded them.
run("ldd" ldd ${plugin})
if(run_out MATCHES "not found")
  message(FATAL_ERROR "${plugin} has unresolved libraries:\n${run_out}")
endif()

# LD_LIBRARY_PATH unset: the GPU scripts export it at the build's lib/, whose libkvq_core would
# then be the one loaded, finding the build's plugins instead of the install's.
run("kvq backends" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
    KVQ_PLUGIN_PATH=${plugin_prefix}/lib/kvq/plugins ${kvq_prefix}/bin/kvq backends)
string(REGEX MATCH "\nexample_nvfp4 [^\n]*" row "\n${run_out}")
if(NOT row MATCHES " 1\\.0\\.0 +available \\(single-threaded CPU example\\) +nvfp4 +HND,NHD x linear,sm100_swizzled +")
  message(FATAL_ERROR "kvq backends: expected an available example_nvfp4 1.0.0 row, got:\n${run_out}")
endif()
if(NOT row MATCHES "${plugin}$")
  message(FATAL_ERROR "kvq backends: expected the row to name ${plugin}:\n${row}")
endif()
string(REGEX MATCH "\nreference_cpu [^\n]*" own "\n${run_out}")
if(NOT own MATCHES " available .*${kvq_prefix}/lib/kvq/plugins/libkvq_reference_cpu\\.so$")
  message(FATAL_ERROR "kvq backends: expected the installed kvq to list its own reference_cpu "
                      "from ${kvq_prefix}/lib/kvq/plugins, got:\n${run_out}")
endif()
message(STATUS "kvq backends lists the example:${row}")

# The engine's own lib/ holds links to the installed libraries (as a distribution links them
# into /usr/lib): kvq's RUNPATH $ORIGIN/../lib loads libkvq_core through a link, and the plugins
# are found beside its real file.
set(elsewhere ${WORK_DIR}/engine)
file(COPY ${kvq_prefix}/bin/kvq DESTINATION ${elsewhere}/bin)
file(MAKE_DIRECTORY ${elsewhere}/lib)
file(GLOB installed_libs RELATIVE ${kvq_prefix}/lib ${kvq_prefix}/lib/libkvq_*.so*)
foreach(lib ${installed_libs})
  file(CREATE_LINK ${kvq_prefix}/lib/${lib} ${elsewhere}/lib/${lib} SYMBOLIC)
endforeach()
run("kvq backends from elsewhere" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
    --unset=KVQ_PLUGIN_PATH ${elsewhere}/bin/kvq backends)
string(REGEX MATCH "\nreference_cpu [^\n]*" own "\n${run_out}")
if(NOT own MATCHES " available .*${kvq_prefix}/lib/kvq/plugins/libkvq_reference_cpu\\.so$")
  message(FATAL_ERROR "a kvq program outside the install: expected reference_cpu from "
                      "${kvq_prefix}/lib/kvq/plugins (beside libkvq_core), got:\n${run_out}")
endif()
