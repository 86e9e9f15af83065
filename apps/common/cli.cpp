#include "cli.h"

#include <csignal>
#include <cstdio>
#include <iostream>
#include <utility>

#include "kvq/core/logging.h"
#include "kvq/core/version.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq::app {
namespace {

int exit_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::out_of_range:
    case ErrorCode::not_found:
    case ErrorCode::unavailable: return kExitUsage;
    default: return kExitRuntime;
  }
}

CheckedConfig check_layout(Config cfg) {
  std::unique_ptr<PageLayout> layout;
  try {
    layout = make_layout(cfg.cache);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    cfg.fail_at(e.key().empty() ? "cache" : e.key(), e.what());
  }
  return {std::move(cfg), std::move(layout)};
}

}  // namespace

int run_main(CLI::App& app, const Runner& runner, int argc, char** argv) {
  // Past a file size limit (ulimit -f), write(2) then fails with EFBIG, which write_file_atomically
  // reports, removing its temporary file; the default action of SIGXFSZ would kill the process
  // mid-write and leave FILE.tmp behind.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << " (try --help)\n";
    return kExitUsage;
  }
  if (!runner) {
    std::cerr << app.get_name() << ": no command given (try --help)\n";
    return kExitUsage;
  }
  try {
    return runner();
  } catch (const Error& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return exit_status_for(e.code());
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << "\n";
    return kExitRuntime;
  }
}

CheckedConfig load_checked_config(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) {
    throw Error(ErrorCode::not_found, file.string() + ": no such config file");
  }
  return check_layout(load_config(file));
}

CheckedConfig parse_checked_config(std::string_view yaml, const std::string& source) {
  return check_layout(parse_config(yaml, source));
}

std::shared_ptr<CommonFlags> add_common_flags(CLI::App& app, const std::string& extra_footer) {
  auto flags = std::make_shared<CommonFlags>();
  app.add_option("--plugin-path", flags->plugin_paths,
                 "Folder (or plugin file) searched for backend plugins first; repeatable")
      ->check(kNonEmpty)
      ->type_name("DIR");
  app.add_option("--log-level", flags->log_level,
                 "trace, debug, info, warn, error or off; wins over KVQ_LOG_LEVEL and the "
                 "config's log.level")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return is_log_level(v)
                       ? std::string()
                       : "expected " + std::string(log_level_words()) + ", found '" + v + "'";
          },
          ""))
      ->type_name("LEVEL");
  app.set_version_flag("--version", KVQ_VERSION_STRING, "Print the kvq version and exit");
  app.footer(
      "Exit status: 0 success, 1 runtime failure, 2 bad usage, bad config or bad input file" +
      extra_footer +
      ".\n"
      "Environment: KVQ_LOG_LEVEL (trace|debug|info|warn|error|off) overrides the config's "
      "log.level;\n"
      "  KVQ_PLUGIN_PATH (folders, colon separated) is searched for backend plugins after\n"
      "  --plugin-path and the config's plugin_paths, before <prefix>/lib/kvq/plugins.");
  return flags;
}

void check_flag_plugin_paths(const CommonFlags& flags) {
  for (const auto& dir : flags.plugin_paths) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
      throw Error(ErrorCode::invalid_argument, "--plugin-path " + dir + ": no such file or folder");
    }
  }
}

void apply_log_level(const std::string& config_level, const CommonFlags& flags) {
  set_log_level(config_level);  // KVQ_LOG_LEVEL, when set, wins over the config
  if (!flags.log_level.empty()) {
    logger().set_level(spdlog::level::from_str(flags.log_level));
  }
}

Config& apply_logging(Config& cfg, const CommonFlags& flags) {
  apply_log_level(cfg.log.level, flags);
  check_flag_plugin_paths(flags);
  std::vector<std::string> paths;
  for (const auto& dir : flags.plugin_paths) {
    paths.push_back(std::filesystem::absolute(dir).lexically_normal().string());
  }
  paths.insert(paths.end(), cfg.plugin_paths.begin(), cfg.plugin_paths.end());
  cfg.plugin_paths = std::move(paths);
  return cfg;
}

}  // namespace kvq::app
