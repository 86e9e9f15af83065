#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
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

// The sections every program reads besides Config's own keys: kvq-demo's.
std::vector<ConfigSectionReader> program_sections(std::optional<demo::DemoSpec>* demo) {
  return {{demo::kDemoSection, [demo](const ConfigSection& section) {
             demo::DemoSpec spec = demo::parse_demo_section(section);
             if (demo) *demo = spec;
           }}};
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

// Everything written to stdout reached it (flushed here, so that a full disk, a closed pipe or
// /dev/full is seen while the exit status can still say so); otherwise says why on stderr and
// turns success into a runtime failure.
int checked_stdout(const std::string& name, int status) {
  errno = 0;
  std::cout.flush();
  int err = errno;
  const bool cout_failed = !std::cout;
  errno = 0;
  const bool stdio_failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (err == 0) err = errno;
  if (!cout_failed && !stdio_failed) return status;
  std::cerr << name << ": cannot write to standard output: "
            << (err != 0 ? std::strerror(err) : "write error") << "\n";
  std::clearerr(stdout);
  return status == kExitOk ? kExitRuntime : status;
}

// A message as the terminal shows it: control bytes escaped (an ESC sequence in an argument, a
// file name or an exception's text must not recolour or rewrite the terminal), line breaks kept.
std::string terminal_text(std::string_view text) {
  std::string out;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t eol = std::min(text.find('\n', from), text.size());
    if (from > 0) out += '\n';
    out += message_text(text.substr(from, eol - from), text.size());
    from = eol + 1;
  }
  return out;
}

int run_unchecked(CLI::App& app, const Runner& runner, int argc, char** argv) {
  // Past a file size limit (ulimit -f), write(2) then fails with EFBIG, which write_file_atomically
  // reports, removing its temporary file; the default action of SIGXFSZ would kill the process
  // mid-write and leave its temporary file behind.
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
    std::cerr << app.get_name() << ": " << terminal_text(e.what()) << " (try --help)\n";
    return kExitUsage;
  }
  if (!runner) {
    std::cerr << app.get_name() << ": no command given (try --help)\n";
    return kExitUsage;
  }
  try {
    return runner();
  } catch (const Error& e) {
    std::cerr << app.get_name() << ": " << terminal_text(e.what()) << "\n";
    return exit_status_for(e.code());
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << terminal_text(e.what()) << "\n";
    return kExitRuntime;
  }
}

}  // namespace

int run_main(CLI::App& app, const Runner& runner, int argc, char** argv) {
  const int status = run_unchecked(app, runner, argc, argv);
  return checked_stdout(app.get_name(), status);
}

CheckedConfig load_checked_config(const std::filesystem::path& file,
                                  std::optional<demo::DemoSpec>* demo) {
  // The non-throwing form: a name too long, a loop of links or a folder without search
  // permission is load_config's to name (exit 2), not an "internal error".
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    throw Error(ErrorCode::not_found, message_text(file.string(), 4096) + ": no such config file");
  }
  return check_layout(load_config(file, program_sections(demo)));
}

CheckedConfig parse_checked_config(std::string_view yaml, const std::string& source,
                                   std::optional<demo::DemoSpec>* demo) {
  return check_layout(parse_config(yaml, source, program_sections(demo)));
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
