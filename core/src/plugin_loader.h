#pragma once
// Private to core: opening one plugin file and checking it in the order the ABI demands
// (kvq/abi/plugin.h): a regular file -> dlopen (RTLD_NOW | RTLD_LOCAL) -> kvq_plugin_entry, a
// function in this library -> call it -> non-null -> abi_version -> struct_size, name and
// functions -> init(host) -> probe. Every library this opens stays loaded for the life of the
// process (a list owned by core, the allowed global state).
#include <boost/dll/shared_library.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "kvq/abi/plugin.h"
#include "kvq/core/registry.h"

namespace kvq {

// A plugin that passed every check, with what its probe said. Writers, readers and runtimes it
// makes hold a shared_ptr to this, and this holds the library: objects keep their code alive.
class LoadedPlugin {
 public:
  std::shared_ptr<const boost::dll::shared_library> library;
  const kvq_plugin* plugin = nullptr;
  PluginInfo info;
};

namespace detail {

// The plugin, or (plugin == nullptr) why `file` cannot be used, without the file name:
// "plugin ABI 1, host ABI 2 (rebuild the plugin against this kvq)".
struct LoadResult {
  std::shared_ptr<const LoadedPlugin> plugin;
  std::string failure;
};

// `file` is the path as found (kept for messages); `canonical` is its canonical form (the key
// under which the library is kept loaded, so two paths to one file open it once).
LoadResult load_plugin(const std::filesystem::path& file, const std::filesystem::path& canonical);

// The host callbacks every plugin's init receives: lines go to kvq's logger.
const kvq_host& host_callbacks();

}  // namespace detail
}  // namespace kvq
