#include "cli.h"

#include <csignal>
#include <cstdio>
#include <iostream>
#include <utility>

#include "kvq/core/logging.h"
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
  // The non-throwing form: a name too long, a loop of links or a folder without search
  // permission is load_config's to name (exit 2), not an "internal error".
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    throw Error(ErrorCode::not_found, message_text(file.string(), 4096) + ": no such config file");
  }
  return check_layout(load_config(file));
}

CheckedConfig parse_checked_config(std::string_view yaml, const std::string& source) {
  return check_layout(parse_config(yaml, source));
}

Config& apply_logging(Config& cfg) {
  set_log_level(cfg.log.level);
  return cfg;
}

}  // namespace kvq::app
