// kvq check CONFIG: validates the whole config without writing anything: syntax, keys, types,
// ranges, the layout's geometry rules, the demo section against the cache, that plugin_paths
// exist and that a backend named in it exists; where that backend is available here, it also
// checks its options (device, threads, geometry) as a write or read would. `auto` is resolved
// as a write on this machine resolves it, and the backend it picks checks the options.
#include <iostream>
#include <optional>

#include "commands.h"
#include "kvq/io/open_backend.h"

namespace kvq::app {
namespace {

// A backend named in the config must be a plugin that can be found and is not ambiguous. It may
// be unavailable here: a GPU config is valid on a machine without a GPU. `auto` is resolved here,
// as `kvq write` would resolve it, and the backend it picks checks the device and threads (auto
// with device cuda:0 on a machine without a GPU picks reference_cpu, which refuses cuda:0).
// Returns the backend's text for the report: "reference_cpu", "auto: reference_cpu here", or
// "cuda (unavailable here)".
std::string check_backend(const Config& cfg) {
  check_plugin_paths(cfg);
  std::optional<OpenedBackend> opened;
  try {
    opened.emplace(open_backend(cfg));  // a name no plugin has: a ConfigError at the key
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable && cfg.backend != "auto") {
      return cfg.backend + " (unavailable here)";
    }
    if (e.code() == ErrorCode::unavailable) cfg.fail_at("backend", e.what());
    throw;
  }
  const auto in_backend = [&](auto&& make) {
    try {
      (void)at_config_keys(cfg, make);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      cfg.fail_at("backend", e.what());
    }
  };
  in_backend([&] { return opened->backend.make_writer(opened->options); });
  in_backend([&] { return opened->backend.make_reader(opened->options); });
  const std::string& name = opened->backend.info().name;
  return cfg.backend == "auto" ? "auto: " + name + " here" : name;
}

}  // namespace

void add_check_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("check", "Validate a config file without writing anything");
  auto config = std::make_shared<std::string>();
  sub->add_option("CONFIG", *config, "YAML config")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  auto common = add_common_flags(*sub);
  sub->callback([&run, config, common] {
    run = [config, common] {
      auto [cfg, layout] = load_checked_config(*config);
      apply_logging(cfg, *common);  // reports a bad KVQ_LOG_LEVEL, as every command does
      const std::string backend = check_backend(cfg);
      std::cout << message_text(*config, 4096) << ": ok (" << cfg.cache.format << ", "
                << cfg.cache.num_blocks << " pages of " << cfg.cache.block_size << " tokens x "
                << cfg.cache.num_kv_heads << " heads x " << cfg.cache.head_size << ", "
                << layout->page_bytes() << " bytes/page, backend " << backend << ")\n";
      return kExitOk;
    };
  });
}

}  // namespace kvq::app
