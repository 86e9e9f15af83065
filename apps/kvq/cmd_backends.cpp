// kvq backends [--plugin-path DIR]...: every plugin found (name, version, available or why not,
// formats, layouts, input dtypes, file), then every file that failed to load and why. Listing is
// the point, so plugins that fail to load do not fail the command (exit 0); a --plugin-path that
// does not exist is bad usage (exit 2).
#include <algorithm>
#include <array>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "kvq/core/registry.h"

namespace kvq::app {
namespace {

namespace fs = std::filesystem;

std::string status_text(const PluginInfo& p) {
  if (!p.available) return "unavailable: " + p.reason;
  return p.reason.empty() ? "available" : "available (" + p.reason + ")";
}

void print_table(const std::vector<PluginInfo>& plugins, std::ostream& out) {
  constexpr size_t kColumns = 7;
  using Row = std::array<std::string, kColumns>;
  std::vector<Row> rows{{"NAME", "VERSION", "STATUS", "FORMATS", "LAYOUTS", "INPUTS", "FILE"}};
  for (const auto& p : plugins) {
    rows.push_back(
        {p.name, p.version, status_text(p), p.formats, p.layouts, p.input_dtypes, p.file.string()});
  }
  std::array<size_t, kColumns> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < kColumns; ++c) {
      line += row[c];
      if (c + 1 < kColumns) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

int list_backends(const std::vector<std::string>& plugin_paths) {
  for (const auto& dir : plugin_paths) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      throw Error(ErrorCode::invalid_argument, "--plugin-path " + dir + ": no such file or folder");
    }
  }
  const std::vector<fs::path> search = Registry::search_path(plugin_paths);
  Registry registry;
  registry.scan(search);

  if (registry.plugins().empty()) {
    std::cout << "no backend plugins found\n";
  } else {
    print_table(registry.plugins(), std::cout);
  }
  if (!registry.failures().empty()) {
    std::cout << "\nnot loaded:\n";
    for (const auto& f : registry.failures()) {
      std::cout << "  " << f.file.string() << ": " << f.reason << "\n";
    }
  }
  std::cout << "\nsearched (in order):";
  if (search.empty()) std::cout << " nothing (set KVQ_PLUGIN_PATH or pass --plugin-path)";
  std::cout << "\n";
  for (const auto& dir : search) std::cout << "  " << dir.string() << "\n";
  return kExitOk;
}

}  // namespace

void add_backends_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "backends",
      "List backend plugins: searched in --plugin-path, KVQ_PLUGIN_PATH, lib/kvq/plugins");
  auto common = add_common_flags(*sub);
  sub->callback([&run, common] {
    run = [common] {
      apply_log_level("info", *common);  // no config: KVQ_LOG_LEVEL, then --log-level
      return list_backends(common->plugin_paths);
    };
  });
}

}  // namespace kvq::app
