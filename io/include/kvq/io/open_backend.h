#pragma once
// config -> registry -> backend: the first steps of the one-way data flow, for any program that
// takes its cache from a kvq config (kvq's commands, kvq-demo, an engine embedding kvq).
#include <optional>
#include <string>

#include "kvq/core/export.h"
#include "kvq/core/registry.h"
#include "kvq/io/config.h"

namespace kvq {

struct OpenedBackend {
  Registry registry;       // what was found (for messages)
  Backend backend;         // the chosen one
  BackendOptions options;  // cache spec, device and threads from the config
};

// Scans the config's plugin_paths (check_plugin_paths first), KVQ_PLUGIN_PATH and the installed
// folder, then selects `name_override` (a --backend flag) or the config's backend, and fills the
// options from the config. Throws kvq::ConfigError at the key's FILE:LINE:COL for a plugin_paths
// entry that does not exist, a config backend no plugin has (listing the ones found and the
// files that failed to load) and a device word that is not one; kvq::Error not_found for a
// `name_override` no plugin has; unavailable with the probe's reason.
KVQ_API OpenedBackend open_backend(const Config& cfg,
                                   const std::optional<std::string>& name_override = {});

// A plugin_paths entry that does not exist is a config error at FILE:LINE:COL (as a missing
// --plugin-path is a usage error): a typo would otherwise leave its plugins silently unfound.
KVQ_API void check_plugin_paths(const Config& cfg);

// Runs `make` (a backend's make_writer, make_reader or make_runtime on the config's options). An
// error the backend pins on a config key ("device", "threads", "cache.head_size") is reported as
// a ConfigError at that key's FILE:LINE:COL.
template <class Make>
auto at_config_keys(const Config& cfg, Make&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    if (e.key().empty()) throw;
    cfg.fail_at(e.key(), e.what());
  }
}

}  // namespace kvq
