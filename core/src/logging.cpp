#include "kvq/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <array>
#include <cstdlib>
#include <string>

#include "kvq/core/status.h"

namespace kvq {
namespace {

// The words config.md documents, and no others (spdlog's own parser also takes "warning", "err"
// and "critical": a config that works here must mean the same to every reader of the docs).
constexpr std::array<std::string_view, 6> kLevels = {"trace", "debug", "info",
                                                     "warn",  "error", "off"};

spdlog::level::level_enum parse_level(std::string_view word) {
  return spdlog::level::from_str(std::string(word));
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto log = std::make_shared<spdlog::logger>(
      "kvq", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_pattern("[kvq] [%^%l%$] %v");
  log->set_level(spdlog::level::info);
  if (const char* env = std::getenv("KVQ_LOG_LEVEL"); env && is_log_level(env)) {
    log->set_level(parse_level(env));
  } else if (env) {  // said once, when the logger is made; the config's level applies
    log->warn("KVQ_LOG_LEVEL={}: not a log level (expected {}); ignored", message_text(env),
              log_level_words());
  }
  return log;
}

}  // namespace

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> log = make_logger();
  return *log;
}

std::string_view log_level_words() {
  static const std::string words = [] {
    std::string w;
    for (std::size_t i = 0; i < kLevels.size(); ++i) {
      if (i > 0) w += i + 1 == kLevels.size() ? " or " : ", ";
      w += kLevels[i];
    }
    return w;
  }();
  return words;
}

bool is_log_level(std::string_view level) {
  for (auto l : kLevels) {
    if (l == level) return true;
  }
  return false;
}

void set_log_level(std::string_view level) {
  if (!is_log_level(level)) {
    throw Error(ErrorCode::invalid_argument, fmt::format("unknown log level '{}': expected {}",
                                                         message_text(level), log_level_words()));
  }
  if (const char* env = std::getenv("KVQ_LOG_LEVEL"); env && is_log_level(env)) level = env;
  logger().set_level(parse_level(level));
}

}  // namespace kvq
