// kvq check CONFIG: validates the whole config without writing anything: syntax, keys, types,
// ranges, the layout's geometry rules, and that a backend named in it exists.
#include <iostream>

#include "commands.h"
#include "kvq/core/registry.h"

namespace kvq::app {
namespace {

// A backend named in the config must be a plugin that can be found and is not ambiguous. It may
// be unavailable here: a GPU config is valid on a machine without a GPU.
void check_backend_exists(const Config& cfg) {
  if (cfg.backend == "auto") return;
  Registry registry;
  registry.scan(Registry::search_path(cfg.plugin_paths, cfg.base_dir()));
  try {
    (void)registry.select(cfg.backend);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unavailable) cfg.fail_at("backend", e.what());
  }
}

}  // namespace

void add_check_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("check", "Validate a config file without writing anything");
  auto config = std::make_shared<std::string>();
  sub->add_option("CONFIG", *config, "YAML config")->required();
  sub->callback([&run, config] {
    run = [config] {
      const auto [cfg, layout] = load_checked_config(*config);
      check_backend_exists(cfg);
      std::cout << *config << ": ok (" << cfg.cache.format << ", " << cfg.cache.num_blocks
                << " pages of " << cfg.cache.block_size << " tokens x " << cfg.cache.num_kv_heads
                << " heads x " << cfg.cache.head_size << ", " << layout->page_bytes()
                << " bytes/page, backend " << cfg.backend << ")\n";
      return kExitOk;
    };
  });
}

}  // namespace kvq::app
