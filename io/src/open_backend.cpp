#include "kvq/io/open_backend.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "kvq/core/logging.h"

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
Backend select_auto(const Registry& registry);

Backend select_configured(const Registry& registry, const Config& cfg) {
  try {
    return cfg.backend == "auto" ? select_auto(registry) : registry.select(cfg.backend);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) throw;
    cfg.fail_at("backend", e.what());
  }
}

// "auto": the available plugin with the highest probe score, the first found winning a tie (as
// Registry::select("auto") chooses). A fallback -- a plugin passed over because it is unavailable
// here, or ignored because two files share its name -- is said in one short info line; the
// reasons and files are debug lines. Selecting the winner by name logs its file at debug level.
Backend select_auto(const Registry& registry) {
  const PluginInfo* best = nullptr;
  for (const PluginInfo& info : registry.plugins()) {
    if (info.available && (!best || info.score > best->score)) best = &info;
  }
  if (!best) return registry.select("auto");  // throws, listing what was found and why
  std::string passed_over;
  for (const PluginInfo& info : registry.plugins()) {
    if (info.available) continue;
    passed_over += (passed_over.empty() ? "" : ", ") + info.name;
    KVQ_LOG_DEBUG("backend auto: {} {} unavailable: {} ({})", info.name, info.version, info.reason,
                  info.file.string());
  }
  for (const PluginFailure& failure : registry.failures()) {
    KVQ_LOG_DEBUG("backend auto: {} not used: {}", failure.file.string(), failure.reason);
  }
  const std::string chosen = best->name;
  KVQ_LOG_DEBUG("backend auto: {} has the highest score of the available plugins ({})", chosen,
                best->score);
  Backend backend = registry.select(chosen);
  if (!passed_over.empty()) {
    KVQ_LOG_INFO("backend auto: using {}; {} unavailable here (KVQ_LOG_LEVEL=debug says why)",
                 chosen, passed_over);
  }
  return backend;
}

}  // namespace

OpenedBackend open_backend(const Config& cfg, const std::optional<std::string>& name_override) {
  check_plugin_paths(cfg);
  Registry registry;
  registry.scan(Registry::search_path(cfg.plugin_paths, cfg.base_dir()));  // logs failures
  Backend backend = name_override ? (*name_override == "auto" ? select_auto(registry)
                                                              : registry.select(*name_override))
                                  : select_configured(registry, cfg);
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
