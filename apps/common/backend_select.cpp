#include "backend_select.h"

namespace kvq::app {

OpenedBackend open_backend(const Config& cfg, const std::optional<std::string>& name_override) {
  Registry registry;
  registry.scan(Registry::search_path(cfg.plugin_paths, cfg.base_dir()));  // logs failures
  const std::string name = name_override.value_or(cfg.backend);
  Backend backend = registry.select(name);
  BackendOptions options;
  options.cache = cfg.cache;
  options.threads = cfg.threads;
  if (cfg.device != "auto") options.device = parse_device(cfg.device);
  return OpenedBackend{std::move(registry), std::move(backend), std::move(options)};
}

}  // namespace kvq::app
