#pragma once
// Finds, loads and selects backend plugins (Boost.DLL). Search order: the config's plugin_paths,
// then KVQ_PLUGIN_PATH (colon separated), then kvq/plugins beside libkvq_core (lib/kvq/plugins).
// A library is loaded once per process and never unloaded (unloading one that registered CUDA
// kernels crashes); writers and readers it made hold a reference to it anyway.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvq/core/attention.h"
#include "kvq/core/cache_spec.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/export.h"
#include "kvq/core/kv_cache.h"

namespace kvq {

// What the host asks a backend for: the cache, the device and, for CPU backends, threads.
struct BackendOptions {
  CacheSpec cache;
  std::optional<Device> device;  // where tensors live; nullopt = the backend's default
                                 // (cuda: cuda:0). A backend refuses a device it cannot use.
  int32_t threads = 0;           // CPU backends: worker threads, 0 = hardware concurrency
};

struct PluginInfo {
  std::string name;
  std::string version;
  std::filesystem::path file;
  std::string formats;
  std::string layouts;
  std::string input_dtypes;  // "bf16,f16,f32"
  bool available = false;
  int32_t score = 0;
  std::string reason;  // probe's reason: why unavailable, or what it will use
};

// A file that was found but could not be used, and why ("no kvq_plugin_entry function", ...).
struct PluginFailure {
  std::filesystem::path file;
  std::string reason;
};

class LoadedPlugin;  // a library kept alive, with its descriptor

// A chosen backend: makes writers and readers that keep its library alive. Each is the plugin's
// object behind the host's interface: a call checks the contract (contract.h) and the backend's
// declared requirements, then crosses the C boundary; errors come back as Status (make_* throw).
class KVQ_API Backend {
 public:
  const PluginInfo& info() const;
  std::shared_ptr<KVCacheWriter> make_writer(const BackendOptions& options) const;  // throws
  std::shared_ptr<KVCacheReader> make_reader(const BackendOptions& options) const;  // throws
  // Whether the plugin has decode attention (kvq_plugin::create_attention, ABI 2.2).
  bool has_attention() const;
  // Throws unavailable when it has none.
  std::shared_ptr<KVCacheAttention> make_attention(const BackendOptions& options) const;
  // The backend's runtime, or a non-owning pointer to host_runtime() when it has none.
  std::shared_ptr<DeviceRuntime> make_runtime(const BackendOptions& options) const;  // throws

 private:
  friend class Registry;
  explicit Backend(std::shared_ptr<const LoadedPlugin> plugin);
  std::shared_ptr<const LoadedPlugin> plugin_;
};

class KVQ_API Registry {
 public:
  // Folders to search for a config's plugin_paths (relative ones are taken relative to base_dir,
  // the config file's folder), in order, then KVQ_PLUGIN_PATH, then the installed folder.
  static std::vector<std::filesystem::path> search_path(
      const std::vector<std::string>& plugin_paths, const std::filesystem::path& base_dir = {});

  // kvq/plugins beside libkvq_core's real file, links resolved, as found when the library loaded
  // (<libdir>/kvq/plugins of a build or an install, wherever it was moved; for kvq's own programs
  // bin/../lib/kvq/plugins). Empty if that file is unknown.
  static std::filesystem::path installed_plugin_dir();

  // Loads every libkvq_*.so in the folders (and files named directly). Failures are recorded, not
  // thrown; loading the same file twice (also through another path) is a no-op. Two files with
  // the same plugin name: neither is used, one failure names both, and select() of that name is
  // an error naming both.
  void scan(const std::vector<std::filesystem::path>& folders_or_files);

  const std::vector<PluginInfo>& plugins() const { return infos_; }
  const std::vector<PluginFailure>& failures() const { return failures_; }

  // "auto": the available plugin with the highest probe score (logs the choice at info level,
  // and says so when a higher-scored one was unavailable). Otherwise by name; throws kvq::Error
  // (not_found listing what was found, or unavailable with the probe's reason).
  Backend select(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<const LoadedPlugin>> loaded_;
  // What plugins() returns by reference: each loaded_ plugin's info, in order, copied from
  // loaded_ at the end of scan() and nowhere else.
  std::vector<PluginInfo> infos_;
  std::vector<PluginFailure> failures_;
  std::vector<std::filesystem::path> scanned_;   // canonical files already tried
  std::vector<std::filesystem::path> searched_;  // folders and files given to scan(), for messages
  std::vector<std::pair<std::string, std::vector<std::filesystem::path>>>
      conflicts_;  // name->files
};

}  // namespace kvq
