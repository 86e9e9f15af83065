// `kvq backends --plugin-path DIR` against the fixtures: the table, the failures, exit statuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "test_support.h"

namespace kvq {
namespace {

using test::fixture;
using test::fixture_dir;
using test::run_command;
using ::testing::HasSubstr;
using ::testing::Not;

std::string kvq_backends(const std::string& args) {
  return std::string("'") + KVQ_BINARY + "' backends " + args;
}

// The table row of plugin `name` (the line starting with it), or "" when there is none.
std::string row_of(const std::string& out, const std::string& name) {
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = out.find('\n', at);
    const std::string line = out.substr(at, end - at);
    if (line.rfind(name + " ", 0) == 0) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return {};
}

TEST(BackendsCommand, ListsPluginsAndFailuresAndExitsZero) {
  const auto r = run_command(kvq_backends(
      "--plugin-path '" + fixture_dir("good").string() + "' --plugin-path '" +
      fixture_dir("unavailable").string() + "' --plugin-path '" + fixture_dir("garbage").string() +
      "' --plugin-path '" + fixture_dir("wrong_abi").string() + "'"));
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("NAME"));
  const std::string good = row_of(r.out, "fixture_good");
  EXPECT_THAT(good, HasSubstr(" 9.8.7 "));
  EXPECT_THAT(good, HasSubstr(" available (fixture ready) "));
  EXPECT_THAT(good, HasSubstr(" fixture "));
  EXPECT_THAT(good, HasSubstr(" one region "));
  EXPECT_THAT(good, HasSubstr(fixture("good", "libkvq_fixture_good.so").string()));
  EXPECT_THAT(row_of(r.out, "fixture_unavailable"), HasSubstr(" unavailable: no fixture device "));
  EXPECT_THAT(r.out, HasSubstr("\nnot loaded:\n"));
  EXPECT_THAT(r.out, HasSubstr("  " + fixture("garbage", "libkvq_garbage.so").string() +
                               ": not a shared library (dlopen: "));
  EXPECT_THAT(r.out, HasSubstr("  " + fixture("wrong_abi", "libkvq_fixture_wrong_abi.so").string() +
                               ": plugin ABI 999, host ABI 2 (rebuild the plugin against this "
                               "kvq)\n"));
  // The search order is printed, --plugin-path first.
  EXPECT_THAT(r.out, HasSubstr("searched (in order):\n  " + fixture_dir("good").string() + "\n"));
}

TEST(BackendsCommand, DuplicateNamesAreListedAsOneFailureNamingBoth) {
  const auto r =
      run_command(kvq_backends("--plugin-path '" + fixture_dir("duplicate").string() + "'"));
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(row_of(r.out, "fixture_twin"), "");
  EXPECT_THAT(r.out, HasSubstr("  " + fixture("duplicate", "libkvq_twin_b.so").string() +
                               ": plugin name 'fixture_twin' is also used by " +
                               fixture("duplicate", "libkvq_twin_a.so").string()));
}

// A FIFO named like a plugin is listed as not loaded, in a scanned folder and named itself, and
// never opened (dlopen would block on it for ever; `timeout` turns a regression into exit 124).
TEST(BackendsCommand, FifoNamedLikeAPluginIsListedNotOpened) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("kvq-backends-fifo-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path fifo = dir / "libkvq_x.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  const std::string line = "\nnot loaded:\n  " + fifo.string() +
                           ": not a regular file (a FIFO): expected a shared "
                           "library\n";
  for (const fs::path& given : {dir, fifo}) {
    const auto r =
        run_command("timeout 20 " + kvq_backends("--plugin-path '" + given.string() + "'"));
    EXPECT_EQ(r.exit_status, 0) << given << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr(line)) << given;
  }
  fs::remove_all(dir);
}

TEST(BackendsCommand, MissingPluginPathIsBadUsage) {
  const auto r = run_command(kvq_backends("--plugin-path /nonexistent/kvq-plugins"));
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err, "kvq: --plugin-path /nonexistent/kvq-plugins: no such file or folder\n");
  EXPECT_THAT(r.out, Not(HasSubstr("NAME")));
}

}  // namespace
}  // namespace kvq
