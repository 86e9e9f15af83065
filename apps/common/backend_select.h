#pragma once
// config -> registry -> backend: the first steps of the one-way data flow, shared by kvq write,
// read, bench and kvq-demo.
#include <optional>
#include <string>

#include "kvq/core/config.h"
#include "kvq/core/registry.h"

namespace kvq::app {

struct OpenedBackend {
  Registry registry;       // what was found (for messages)
  Backend backend;         // the chosen one
  BackendOptions options;  // cache spec, device and threads from the config
};

// Scans the config's plugin_paths, KVQ_PLUGIN_PATH and the installed folder, then selects
// `name_override` (a --backend flag) or the config's backend. Throws kvq::Error: not_found when no
// plugin has that name (listing the ones found and the files that failed to load), unavailable
// with the probe's reason.
OpenedBackend open_backend(const Config& cfg, const std::optional<std::string>& name_override = {});

}  // namespace kvq::app
