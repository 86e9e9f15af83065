// kvq check CONFIG: validates the whole config (syntax, keys, types, ranges, the layout's
// geometry rules, and that the chosen backend exists) without writing anything.
#include <iostream>

#include "commands.h"

namespace kvq::app {

void add_check_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand("check", "Validate a config file without writing anything");
  auto config = std::make_shared<std::string>();
  sub->add_option("CONFIG", *config, "YAML config")->required();
  sub->callback([&run, config] {
    run = [config] {
      Config cfg = load_checked_config(*config);
      std::cout << *config << ": ok (format " << cfg.cache.format << ", " << cfg.cache.num_blocks
                << " blocks of " << cfg.cache.block_size << " tokens, " << cfg.cache.num_kv_heads
                << " KV heads x " << cfg.cache.head_size << ", backend " << cfg.backend << ")\n";
      return kExitOk;
    };
  });
}

}  // namespace kvq::app
