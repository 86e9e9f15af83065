#pragma once
// What every kvq command-line program shares: the exit-status contract of
// docs/architecture.md and config loading with every check (core's and the layout's).
//   0 success; 1 runtime failure; 2 bad usage, bad config or bad input file.
// Errors go to stderr as one line naming the file (FILE:LINE:COL for YAML).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "demo_spec.h"
#include "kvq/core/page_layout.h"
#include "kvq/io/config.h"

namespace kvq::app {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// A subcommand's work, chosen while parsing and run after it.
using Runner = std::function<int()>;

// Parses argv, runs the chosen Runner, maps exceptions to exit statuses with one stderr line.
int run_main(CLI::App& app, const Runner& runner, int argc, char** argv);

// A config that passed every check, with the layout the checks built (no need to build another).
struct CheckedConfig {
  Config config;
  std::unique_ptr<PageLayout> layout;
};

// load_config + the layout's geometry/format checks, all reported as FILE:LINE:COL. Every program
// reads and checks kvq-demo's `demo:` section too (demo_spec.h), so that a config written for the
// demo is a config for `kvq check` and every command; `demo`, when given, receives it.
CheckedConfig load_checked_config(const std::filesystem::path& file,
                                  std::optional<demo::DemoSpec>* demo = nullptr);
// The same for a config given as text (kvq-demo's embedded default).
CheckedConfig parse_checked_config(std::string_view yaml, const std::string& source,
                                   std::optional<demo::DemoSpec>* demo = nullptr);

// The options every kvq program and subcommand takes, one convention for `kvq` and `kvq-demo`:
//   --plugin-path DIR  (repeatable) searched for backend plugins first, before the config's
//                      plugin_paths, KVQ_PLUGIN_PATH and <prefix>/lib/kvq/plugins
//   --log-level LEVEL  trace|debug|info|warn|error|off; wins over KVQ_LOG_LEVEL and log.level
//   --version          prints the kvq version
// and the help footer naming the exit statuses and the environment variables.
struct CommonFlags {
  std::vector<std::string> plugin_paths;
  std::string log_level;  // empty: not given
};
std::shared_ptr<CommonFlags> add_common_flags(CLI::App& app, const std::string& extra_footer = "");

// Throws a usage error (exit 2) for a --plugin-path that does not exist.
void check_flag_plugin_paths(const CommonFlags& flags);

// Sets the log level: `config_level` (a config's log.level; KVQ_LOG_LEVEL wins over it), then
// --log-level when given.
void apply_log_level(const std::string& config_level, const CommonFlags& flags);

// Applies log.level (and --log-level) and puts the --plugin-path folders, absolute, before the
// config's plugin_paths. Returns the config.
Config& apply_logging(Config& cfg, const CommonFlags& flags = {});

// For an option whose value is a file path or a word: an empty value ("--output ''") is a usage
// error, not an option left unset. No description: the help shows the option's own metavar
// (FILE, DIR, NAME), not "TEXT:NON-EMPTY".
inline const CLI::Validator kNonEmpty(
    [](const std::string& v) { return v.empty() ? std::string("expected a value, found ''") : ""; },
    "");

}  // namespace kvq::app
