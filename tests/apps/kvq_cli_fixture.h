#pragma once
// A fixture for tests that run the built `kvq` program (tests/apps): its own temporary folder,
// `kvq ARGS` with stdout and stderr to files there, and what it printed. ctest sets
// KVQ_BUILD_DIR (where bin/kvq is) and KVQ_SOURCE_DIR; a test run by hand without them skips.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kvq::test {

struct CliResult {
  int status = -1;  // exit status, -1 when killed by a signal
  std::string out, err;
};

inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class KvqCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    if (env_or_empty("KVQ_BUILD_DIR").empty() || env_or_empty("KVQ_SOURCE_DIR").empty()) {
      GTEST_SKIP() << "KVQ_BUILD_DIR / KVQ_SOURCE_DIR not set (run through ctest)";
    }
    kvq_ = fs::path(env_or_empty("KVQ_BUILD_DIR")) / "bin" / "kvq";
    source_ = env_or_empty("KVQ_SOURCE_DIR");
    dir_ = fs::temp_directory_path() /
           ("kvq_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // A file in this test's folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // `shell` runs first in the same shell (e.g. "ulimit -f 8; ").
  CliResult kvq(const std::string& args, const std::string& shell = "") const {
    const std::string cmd =
        shell + kvq_.string() + " " + args + " >" + path("stdout") + " 2>" + path("stderr");
    const int raw = std::system(cmd.c_str());
    CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(dir_ / "stdout");
    r.err = slurp(dir_ / "stderr");
    return r;
  }

  std::filesystem::path kvq_, source_, dir_;
};

}  // namespace kvq::test
