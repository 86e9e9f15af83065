#pragma once
// What every kvq command-line program shares: the exit-status contract of
// docs/architecture.md and config loading with every check (core's and the layout's).
//   0 success; 1 runtime failure; 2 bad usage, bad config or bad input file.
// Errors go to stderr as one line naming the file (FILE:LINE:COL for YAML).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <memory>

#include "kvq/core/config.h"
#include "kvq/core/page_layout.h"

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

// load_config + the layout's geometry/format checks, all reported as FILE:LINE:COL.
CheckedConfig load_checked_config(const std::filesystem::path& file);
// The same for a config given as text (kvq-demo's embedded default).
CheckedConfig parse_checked_config(std::string_view yaml, const std::string& source);

// Applies log.level and returns the config.
Config& apply_logging(Config& cfg);

// For an option whose value is a file path or a word: an empty value ("--output ''") is a usage
// error, not an option left unset.
inline const CLI::Validator kNonEmpty(
    [](const std::string& v) { return v.empty() ? std::string("expected a value, found ''") : ""; },
    "NON-EMPTY");

}  // namespace kvq::app
