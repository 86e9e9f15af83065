#pragma once
// kvq's one logger (spdlog, stderr, "[kvq] [level] message"). Owned by core; plugins log through
// it because they link the same libkvq_core.so the host does. Level from the config's log.level,
// or KVQ_LOG_LEVEL (trace|debug|info|warn|error|off) when set, which wins.
#include <spdlog/spdlog.h>

#include <string_view>

#include "kvq/core/export.h"

namespace kvq {

KVQ_API spdlog::logger& logger();

// Sets the level from a word; throws kvq::Error on an unknown word. KVQ_LOG_LEVEL, when set,
// overrides `level`.
KVQ_API void set_log_level(std::string_view level);

// True for the words set_log_level accepts.
KVQ_API bool is_log_level(std::string_view level);

// Those words for an error message: "trace, debug, info, warn, error or off".
KVQ_API std::string_view log_level_words();

}  // namespace kvq

#define KVQ_LOG_TRACE(...) ::kvq::logger().trace(__VA_ARGS__)
#define KVQ_LOG_DEBUG(...) ::kvq::logger().debug(__VA_ARGS__)
#define KVQ_LOG_INFO(...) ::kvq::logger().info(__VA_ARGS__)
#define KVQ_LOG_WARN(...) ::kvq::logger().warn(__VA_ARGS__)
#define KVQ_LOG_ERROR(...) ::kvq::logger().error(__VA_ARGS__)
