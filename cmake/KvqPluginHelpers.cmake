# kvq_add_backend(NAME [SOURCES] src... [LINK libs...]) for plugins built against an installed
# kvq (find_package(kvq)). Mirrors the in-tree helper (cmake/KvqHelpers.cmake):
#   - a MODULE library named libkvq_NAME.so (what a registry folder scan picks up),
#   - built against the C boundary alone (kvq::abi: kvq/abi/plugin.h, plugin_cpp.h, page.h), so
#     any C++17 compiler builds it, without spdlog, fmt or Boost on its include path,
#   - hidden visibility: the only exported symbol is kvq_plugin_entry (KVQ_PLUGIN_EXPORT_ENTRY),
#   - built into <build>/lib/kvq/plugins, installed into <prefix>/${KVQ_PLUGIN_INSTALL_DIR},
#   - RPATH $ORIGIN/../.. and kvq's own library folder, for a plugin that LINKs kvq's libraries.
# Installed next to kvq's own plugins, kvq finds it; elsewhere, point KVQ_PLUGIN_PATH (or a
# config's plugin_paths) at one of the two folders, not both (two files of one name: neither used).
function(kvq_add_backend name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINK" ${ARGN})
  set(target kvq_backend_${name})
  add_library(${target} MODULE ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE kvq::abi ${ARG_LINK})
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES
    PREFIX "libkvq_"
    OUTPUT_NAME "${name}"
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib/kvq/plugins
    INSTALL_RPATH "$ORIGIN/../..;${KVQ_LIBRARY_DIR}")
  install(TARGETS ${target} LIBRARY DESTINATION ${KVQ_PLUGIN_INSTALL_DIR})
endfunction()
