# ctest -P script: the out-of-tree story end to end, as a plugin author would do it.
#   1. cmake --install the kvq build (built with the project's compiler, gcc in CI) into a prefix
#      (no root: it is under the build folder);
#   2. configure, build and install examples/custom_backend against it (find_package(kvq)) with
#      another compiler, clang++, as strict C++17 with warnings as errors;
#   3. prove what the plugin was built from and with:
#      - compile_commands.json: clang++ compiled it, with -std=c++17, and its only include folder
#        is the kvq prefix's include/ (kvq::abi): no spdlog, fmt or Boost folder and none of their
#        definitions (SPDLOG_*, FMT_*, BOOST_*), which linking kvq::core would have added. spdlog
#        and fmt also live in /usr/include on Debian, so "#include <spdlog/...> fails" proves
#        nothing; the target's flags do;
#      - readelf: the .comment names clang; NEEDED lists no libkvq_*, libspdlog, libfmt or
#        libboost (the plugin links no kvq library); kvq_plugin_entry is its one exported
#        symbol (besides namespace std's template instantiations);
#   4. run the installed `kvq backends --plugin-path` at the installed plugin and check that
#      example_nvfp4 is listed and available, and that the installed kvq found its own
#      reference_cpu beside libkvq_core (<prefix>/lib/kvq/plugins);
#   5. run a copy of kvq from another folder whose lib/ links to the installed libkvq_core (as an
#      engine embedding kvq does): it finds the same plugins, beside the library's real file.
# plugin_example_backend_test (example_backend_test.cpp) then writes with the installed plugin,
# through the registry and through the installed `kvq write`, and compares with reference_cpu.
# Inputs (-D): KVQ_BUILD_DIR, KVQ_SOURCE_DIR, WORK_DIR, GENERATOR, CLANGXX, KVQ_COMPILER (what
# built kvq, for the log), BUILD_TYPE, DLPACK_DIR, READELF.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

if(NOT CLANGXX OR NOT EXISTS "${CLANGXX}")
  message(FATAL_ERROR "clang++ not found (CLANGXX='${CLANGXX}'): this test builds the example "
                      "with clang while kvq is built with gcc (Debian: apt-get install clang)")
endif()
if(NOT READELF)
  find_program(READELF readelf REQUIRED)
endif()

set(kvq_prefix ${WORK_DIR}/kvq-prefix)
set(example_build ${WORK_DIR}/example-build)
set(plugin_prefix ${WORK_DIR}/plugin-prefix)
file(REMOVE_RECURSE ${WORK_DIR})

# ---- 1, 2: install kvq, build and install the example with clang ------------------------------
run("installing kvq" ${CMAKE_COMMAND} --install ${KVQ_BUILD_DIR} --prefix ${kvq_prefix})
# No compiler launcher (ccache): compile_commands.json then starts with the compiler itself.
run("configuring the example with clang" ${CMAKE_COMMAND}
    -S ${KVQ_SOURCE_DIR}/examples/custom_backend -B ${example_build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CLANGXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_STANDARD_REQUIRED=ON -DCMAKE_CXX_EXTENSIONS=OFF
    "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror"
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_PREFIX_PATH=${kvq_prefix})
run("building the example with clang" ${CMAKE_COMMAND} --build ${example_build})
run("installing the example" ${CMAKE_COMMAND} --install ${example_build} --prefix ${plugin_prefix})

set(plugin ${plugin_prefix}/lib/kvq/plugins/libkvq_example_nvfp4.so)
if(NOT EXISTS ${plugin})
  file(GLOB_RECURSE installed RELATIVE ${plugin_prefix} ${plugin_prefix}/*)
  message(FATAL_ERROR "expected ${plugin} after installing the example; found: ${installed}")
endif()

# ---- 3a: the flags it was compiled with -----------------------------------------------------------
file(READ ${example_build}/compile_commands.json commands)
string(JSON count LENGTH "${commands}")
if(NOT count EQUAL 1)
  message(FATAL_ERROR "compile_commands.json: expected one source (example_backend.cpp), found "
                      "${count}:\n${commands}")
endif()
string(JSON command GET "${commands}" 0 command)
string(JSON source GET "${commands}" 0 file)
if(NOT source MATCHES "/example_backend\\.cpp$")
  message(FATAL_ERROR "compile_commands.json: expected example_backend.cpp, found ${source}")
endif()
separate_arguments(args UNIX_COMMAND "${command}")
list(GET args 0 compiler)
if(NOT compiler STREQUAL CLANGXX)
  message(FATAL_ERROR "the example was compiled by '${compiler}', expected ${CLANGXX}:\n${command}")
endif()
if(NOT " ${command} " MATCHES " -std=c\\+\\+17 ")
  message(FATAL_ERROR "the example was not compiled as strict C++17 (-std=c++17):\n${command}")
endif()
set(includes "")
set(next_is_include OFF)
foreach(arg ${args})
  if(next_is_include)
    list(APPEND includes "${arg}")
    set(next_is_include OFF)
  elseif(arg MATCHES "^-(I|isystem|iquote|idirafter)$")
    set(next_is_include ON)
  elseif(arg MATCHES "^-(I|isystem|iquote|idirafter)(.+)$")
    list(APPEND includes "${CMAKE_MATCH_2}")
  elseif(arg MATCHES "^-D(SPDLOG|FMT|BOOST)")
    message(FATAL_ERROR "the example was compiled with ${arg} (a definition of spdlog, fmt or "
                        "Boost: something beyond kvq::abi reached it):\n${command}")
  endif()
endforeach()
# dlpack/dlpack.h is the one other header kvq::abi needs; in /usr/include (libdlpack-dev) CMake
# leaves it implicit, elsewhere it is its own folder (DLPACK_DIR, as kvq's build found it).
file(REAL_PATH "${DLPACK_DIR}" dlpack_dir)
foreach(dir ${includes})
  file(REAL_PATH "${dir}" real)
  file(REAL_PATH "${kvq_prefix}/include" kvq_include)
  if(NOT real STREQUAL kvq_include AND NOT real STREQUAL dlpack_dir)
    message(FATAL_ERROR "the example's include path has ${dir}: expected only "
                        "${kvq_prefix}/include (kvq::abi) and the dlpack folder:\n${command}")
  endif()
  if(real MATCHES "spdlog|fmt|boost")
    message(FATAL_ERROR "spdlog, fmt or Boost on the example's include path: ${dir}:\n${command}")
  endif()
endforeach()
message(STATUS "example compiled by ${compiler} -std=c++17 (kvq by ${KVQ_COMPILER}) with "
               "include path: ${includes}")

# ---- 3b: the library it became ----------------------------------------------------------------
run("readelf -p .comment" ${READELF} -p .comment ${plugin})
if(NOT run_out MATCHES "clang version")
  message(FATAL_ERROR "${plugin}: .comment names no clang:\n${run_out}")
endif()
run("readelf -d" ${READELF} -d ${plugin})
# "(NEEDED)  Shared library: [libc.so.6]" -> "libc.so.6" (square brackets would bind CMake list
# items together).
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${run_out}")
list(TRANSFORM needed REPLACE "^.*library: .(.*).$" "\\1")
foreach(entry ${needed})
  if(entry MATCHES "kvq|spdlog|fmt|boost|yaml")
    message(FATAL_ERROR "${plugin} needs a library beyond the C++ runtime: ${entry}\n${run_out}")
  endif()
endforeach()
run("readelf --dyn-syms" ${READELF} --wide --dyn-syms ${plugin})
string(REGEX MATCHALL "[^\n]* (GLOBAL|WEAK|UNIQUE) +DEFAULT +[0-9]+ [^\n]*" exported "${run_out}")
list(TRANSFORM exported REPLACE "^.* " "")
# Instantiated templates of namespace std (std::to_string, operator+) keep libstdc++'s default
# visibility, as weak definitions: not the plugin's own.
list(FILTER exported EXCLUDE REGEX "^_ZZ?(NK?)?St")
if(NOT exported STREQUAL "kvq_plugin_entry")
  message(FATAL_ERROR "${plugin}: expected kvq_plugin_entry as its one exported definition "
                      "(besides namespace std's), found: ${exported}\n${run_out}")
endif()

# It must load by itself (RUNPATH), whatever it needs.
run("ldd" ldd ${plugin})
if(run_out MATCHES "not found")
  message(FATAL_ERROR "${plugin} has unresolved libraries:\n${run_out}")
endif()
string(REPLACE ";" ", " needed_text "${needed}")
message(STATUS "the example: built by clang, needs ${needed_text}, exports kvq_plugin_entry")

# ---- 4: the installed kvq lists it ------------------------------------------------------------
# LD_LIBRARY_PATH unset: the GPU scripts export it at the build's lib/, whose libkvq_core would
# then be the one loaded, finding the build's plugins instead of the install's.
run("kvq backends" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=KVQ_PLUGIN_PATH
    ${kvq_prefix}/bin/kvq backends --plugin-path ${plugin_prefix}/lib/kvq/plugins)
string(REGEX MATCH "\nexample_nvfp4 [^\n]*" row "\n${run_out}")
if(NOT row MATCHES " 1\\.0\\.0 +available \\(single-threaded CPU example\\) +nvfp4 +HND,NHD x linear,sm100_swizzled +")
  message(FATAL_ERROR "kvq backends: expected an available example_nvfp4 1.0.0 row, got:\n${run_out}")
endif()
if(NOT row MATCHES "${plugin}$")
  message(FATAL_ERROR "kvq backends: expected the row to name ${plugin}:\n${row}")
endif()
if(run_out MATCHES "not loaded")
  message(FATAL_ERROR "kvq backends: a plugin failed to load:\n${run_out}")
endif()
string(REGEX MATCH "\nreference_cpu [^\n]*" own "\n${run_out}")
if(NOT own MATCHES " available .*${kvq_prefix}/lib/kvq/plugins/libkvq_reference_cpu\\.so$")
  message(FATAL_ERROR "kvq backends: expected the installed kvq to list its own reference_cpu "
                      "from ${kvq_prefix}/lib/kvq/plugins, got:\n${run_out}")
endif()
string(STRIP "${row}" row)
message(STATUS "kvq backends lists the example: ${row}")

# ---- 5: an engine's own lib/ holding links to the installed libraries ---------------------------
# (as a distribution links them into /usr/lib): kvq's RUNPATH $ORIGIN/../lib loads libkvq_core
# through a link, and the plugins are found beside its real file.
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
