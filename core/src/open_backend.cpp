#include "kvq/core/open_backend.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

namespace kvq {

void check_plugin_paths(const Config& cfg) {
  const auto search = Registry::search_path(cfg.plugin_paths, cfg.base_dir());
  for (std::size_t i = 0; i < cfg.plugin_paths.size(); ++i) {
    std::error_code ec;
    if (!std::filesystem::exists(search[i], ec)) {
      cfg.fail_at("plugin_paths", "'" + cfg.plugin_paths[i] + "': no such file or folder (" +
                                      search[i].string() + ")");
    }
  }
}

namespace {

// The config's backend: a name no plugin has, or more than one has, is an error in the config and
// names its FILE:LINE:COL; one that is found but unavailable here (no GPU) keeps its own code
// (unavailable) and message.
Backend select_configured(const Registry& registry, const Config& cfg) {
  try {
    return registry.select(cfg.backend);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) throw;
    cfg.fail_at("backend", e.what());
  }
}

}  // namespace

OpenedBackend open_backend(const Config& cfg, const std::optional<std::string>& name_override) {
  check_plugin_paths(cfg);
  Registry registry;
  registry.scan(Registry::search_path(cfg.plugin_paths, cfg.base_dir()));  // logs failures
  Backend backend =
      name_override ? registry.select(*name_override) : select_configured(registry, cfg);
  BackendOptions options;
  options.cache = cfg.cache;
  options.threads = cfg.threads;
  if (cfg.device != "auto") {
    // load_config refuses a bad word; a Config built in code may still hold one.
    options.device = parse_device(cfg.device);
    if (!options.device) {
      cfg.fail_at("device", fmt::format("expected auto, cpu or cuda:N, found '{}'", cfg.device));
    }
  }
  return OpenedBackend{std::move(registry), std::move(backend), std::move(options)};
}

}  // namespace kvq
