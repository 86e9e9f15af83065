# `kvq bench` (issue 7): the sweep, runner and report as a static library that the kvq program
# and the bench unit tests both link; plot_bench.py installed where the program finds it
# (bin/../share/kvq). Included from apps/CMakeLists.txt after the kvq target.
add_library(kvq_bench STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bench_attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_data.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_plot.cpp)
target_include_directories(kvq_bench PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(kvq_bench PUBLIC kvq::core nlohmann_json::nlohmann_json fmt::fmt)
# The source tree's scripts/, for a build tree that is not inside the source tree.
target_compile_definitions(kvq_bench PRIVATE KVQ_SOURCE_SCRIPTS_DIR="${PROJECT_SOURCE_DIR}/scripts")
kvq_set_warnings(kvq_bench)
target_link_libraries(kvq PRIVATE kvq_bench)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/plot_bench.py DESTINATION ${CMAKE_INSTALL_DATADIR}/kvq)
