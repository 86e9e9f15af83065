#pragma once
// A fixture for tests that run the built `kvq` program (tests/apps): its own temporary folder,
// `kvq ARGS` with stdout and stderr to files there, and what it printed. bin/kvq is found under
// KVQ_BUILD_DIR and the sources under KVQ_SOURCE_DIR: from the environment when set (ctest sets
// both; scripts/gpu_session.sh sets them on the GPU machine, where this machine's paths do not
// exist), else the folders CMake compiled in (KVQ_BUILD_DIR_DEFAULT, KVQ_SOURCE_DIR_DEFAULT). A
// kvq that is not there is a failure, never a skip.
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

#if !defined(KVQ_BUILD_DIR_DEFAULT) || !defined(KVQ_SOURCE_DIR_DEFAULT)
#error "the test target defines KVQ_BUILD_DIR_DEFAULT and KVQ_SOURCE_DIR_DEFAULT (tests/apps)"
#endif

// Whether this test binary is built with AddressSanitizer (KVQ_SANITIZE=ON gives every target of
// the build, bin/kvq and its plugins included, -fsanitize=address: cmake/KvqHelpers.cmake). GCC
// says so with __SANITIZE_ADDRESS__, Clang with __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Skips the test, saying why, when the build is sanitized: for a test of how kvq fails when the
// memory it asks for is refused, which ASan does not let happen (it reserves terabytes of shadow
// address space, so `ulimit -v` stops it starting; a failed `new` aborts the program rather than
// throwing std::bad_alloc, whatever ASAN_OPTIONS says).
#define KVQ_SKIP_UNDER_ASAN(why)                                                           \
  do {                                                                                     \
    if (::kvq::test::kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer build: " << why; \
  } while (0)

// The environment's `name`, else `fallback`.
inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

inline std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class KvqCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    kvq_ = fs::path(env_or("KVQ_BUILD_DIR", KVQ_BUILD_DIR_DEFAULT)) / "bin" / "kvq";
    source_ = env_or("KVQ_SOURCE_DIR", KVQ_SOURCE_DIR_DEFAULT);
    ASSERT_TRUE(fs::is_regular_file(kvq_)) << kvq_ << " is missing (build the kvq target)";
    ASSERT_TRUE(fs::is_directory(source_ / "configs")) << source_ << " has no configs/";
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
