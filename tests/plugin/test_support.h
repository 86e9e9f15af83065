#pragma once
// Shared by the plugin tests: where the fixtures are, running the kvq binary, capturing kvq's log.
#include <spdlog/sinks/ostream_sink.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

namespace kvq::test {

// ${PROJECT_BINARY_DIR}/test-plugins/<case>
std::filesystem::path fixture_dir(const std::string& kase);
// ${PROJECT_BINARY_DIR}/test-plugins/<case>/<file>
std::filesystem::path fixture(const std::string& kase, const std::string& file);

struct CommandResult {
  int exit_status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` through /bin/sh with KVQ_PLUGIN_PATH unset (the caller's environment must not
// decide what is found) and captures both streams.
CommandResult run_command(const std::string& command);

// Copies kvq::logger()'s output (at info and above, whatever KVQ_LOG_LEVEL says) into a string
// while alive.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
};

}  // namespace kvq::test
