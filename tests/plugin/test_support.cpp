#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "kvq/core/logging.h"

namespace kvq::test {

namespace fs = std::filesystem;

fs::path fixture_dir(const std::string& kase) {
  return fs::path(KVQ_FIXTURE_DIR) / kase;
}

fs::path fixture(const std::string& kase, const std::string& file) {
  return fixture_dir(kase) / file;
}

namespace {

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

CommandResult run_command(const std::string& command) {
  const fs::path dir = fs::temp_directory_path() / ("kvq-plugin-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string full =
      "env -u KVQ_PLUGIN_PATH " + command + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int raw = std::system(full.c_str());
  CommandResult r;
  r.exit_status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove_all(dir);
  return r;
}

// At info whatever KVQ_LOG_LEVEL says, so that the captured text does not depend on the caller's
// environment; the level goes back afterwards.
LogCapture::LogCapture()
    : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)),
      level_(kvq::logger().level()) {
  sink_->set_pattern("[%l] %v");
  kvq::logger().sinks().push_back(sink_);
  kvq::logger().set_level(spdlog::level::info);
}

LogCapture::~LogCapture() {
  kvq::logger().set_level(level_);
  auto& sinks = kvq::logger().sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

}  // namespace kvq::test
