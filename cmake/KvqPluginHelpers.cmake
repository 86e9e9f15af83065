# kvq_add_backend(NAME SOURCES...) for plugins built against an installed kvq (find_package(kvq)).
# Mirrors the in-tree helper: MODULE library named libkvq_NAME.so, hidden visibility, installed
# into lib/kvq/plugins so KVQ_PLUGIN_PATH or the installed kvq finds it.
function(kvq_add_backend name)
  set(target kvq_backend_${name})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE kvq::core kvq::layouts)
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES PREFIX "libkvq_" OUTPUT_NAME "${name}"
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  install(TARGETS ${target} LIBRARY DESTINATION ${KVQ_PLUGIN_INSTALL_DIR})
endfunction()
