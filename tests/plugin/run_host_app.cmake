# ctest -P script: a host program against the installed package, as a user would build it.
#   1. cmake --install the kvq build into a prefix under the build folder,
#   2. configure and build examples/host_app with find_package(kvq) (CMAKE_PREFIX_PATH),
#   3. build the same main.cpp with `g++ $(pkg-config --cflags --libs kvq)` (PKG_CONFIG_PATH),
#   4. run both on <prefix>/share/kvq/configs/reference_cpu.yaml and check the report (backend,
#      cache size, K and V errors), then on a copy with log.level debug and check kvq's debug
#      line (the config's level applied by the host).
# Inputs (-D): KVQ_BUILD_DIR, KVQ_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
  set(run_err "${err}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/kvq-prefix)
set(cmake_build ${WORK_DIR}/cmake-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run("installing kvq" ${CMAKE_COMMAND} --install ${KVQ_BUILD_DIR} --prefix ${prefix})
set(config ${prefix}/share/kvq/configs/reference_cpu.yaml)
if(NOT EXISTS ${config})
  message(FATAL_ERROR "expected the installed configs in ${prefix}/share/kvq/configs")
endif()
file(READ ${config} text)
string(REPLACE "level: info" "level: debug" debug_text "${text}")
if(debug_text STREQUAL text)
  message(FATAL_ERROR "${config}: no 'level: info' to turn into debug")
endif()
file(WRITE ${WORK_DIR}/debug.yaml "${debug_text}")

# 2. CMake.
run("configuring examples/host_app" ${CMAKE_COMMAND} -S ${KVQ_SOURCE_DIR}/examples/host_app
    -B ${cmake_build} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_PREFIX_PATH=${prefix})
run("building examples/host_app" ${CMAKE_COMMAND} --build ${cmake_build})

# 3. pkg-config, in a shell as the README writes it.
find_program(PKG_CONFIG pkg-config REQUIRED)
run("pkg-config kvq" ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig
    ${PKG_CONFIG} --cflags --libs kvq)
message(STATUS "pkg-config --cflags --libs kvq: ${run_out}")
run("building examples/host_app with pkg-config" ${CMAKE_COMMAND} -E env
    PKG_CONFIG_PATH=${prefix}/lib/pkgconfig sh -c
    "\"${CXX_COMPILER}\" -std=c++20 -O2 \"${KVQ_SOURCE_DIR}/examples/host_app/main.cpp\" $(pkg-config --cflags --libs kvq) -Wl,-rpath,$(pkg-config --variable=libdir kvq) -o \"${WORK_DIR}/host_app_pc\"")

# 4. Both programs, with the installed libraries only (LD_LIBRARY_PATH and KVQ_PLUGIN_PATH unset:
#    the plugin comes from <prefix>/lib/kvq/plugins, beside libkvq_core).
foreach(app ${cmake_build}/host_app ${WORK_DIR}/host_app_pc)
  run("${app}" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=KVQ_PLUGIN_PATH
      --unset=KVQ_LOG_LEVEL ${app} ${config} 100)
  foreach(expect
      "host_app: backend reference_cpu, nvfp4 cache of 256 pages x 18432 bytes"
      "wrote and read 100 tokens x 8 heads x 128"
      "K relative error 0\\.[01][0-9]+, max error [0-9.]+ \\(k_scale 1\\)"
      "V relative error 0\\.[01][0-9]+, max error [0-9.]+ \\(v_scale 1\\)")
    if(NOT run_out MATCHES "${expect}")
      message(FATAL_ERROR "${app}: expected '${expect}' in:\n${run_out}${run_err}")
    endif()
  endforeach()
  if(run_err MATCHES "\\[debug\\]")
    message(FATAL_ERROR "${app}: log.level info printed debug lines:\n${run_err}")
  endif()
  run("${app} (log.level debug)" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
      --unset=KVQ_PLUGIN_PATH --unset=KVQ_LOG_LEVEL ${app} ${WORK_DIR}/debug.yaml)
  if(NOT run_err MATCHES "\\[kvq\\] \\[debug\\] backend reference_cpu")
    message(FATAL_ERROR "${app}: log.level debug: expected kvq's debug line, got:\n${run_err}")
  endif()
  message(STATUS "${app}:\n${run_out}")
endforeach()
