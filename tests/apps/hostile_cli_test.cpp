// `kvq` and `kvq-demo` against hostile files and environments (docs/robustness.md): a FIFO as
// the config, config paths that cannot name a file, a YAML tag, a stdout that cannot be written,
// control characters in arguments and in KVQ_LOG_LEVEL. Each must end in one line naming what
// was expected, what was found and where, with the documented exit status -- never a hang, a
// crash, an "internal error" or raw escape sequences on the terminal.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvq_cli_fixture.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;
using test::CliResult;

class HostileCli : public test::KvqCliTest {
 protected:
  // `command` through the shell, stdout and stderr as `redirect` says (default: files here).
  CliResult shell(const std::string& command, const std::string& redirect = "") const {
    const std::string cmd = command + (redirect.empty() ? " >" + path("stdout") : " " + redirect) +
                            " 2>" + path("stderr");
    const int raw = std::system(cmd.c_str());
    CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = test::slurp(dir_ / "stdout");
    r.err = test::slurp(dir_ / "stderr");
    std::error_code ec;
    fs::remove(dir_ / "stdout", ec);
    return r;
  }
  std::string demo() const { return "'" + (kvq_.parent_path() / "kvq-demo").string() + "'"; }
  std::string kvq_bin() const { return "'" + kvq_.string() + "'"; }
  std::string config() const { return (source_ / "configs" / "nvfp4_sm100.yaml").string(); }

  static void expect_one_line(const CliResult& r, int status, const std::string& start) {
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_EQ(r.err.rfind(start, 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  }
};

// A FIFO as the config was opened for reading, which waits for a writer for ever. Now every
// command refuses it at once (`timeout` turns a regression into exit 124).
TEST_F(HostileCli, AFifoAsTheConfigIsRefusedNotWaitedOn) {
  const std::string fifo = path("config.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  const std::string expected = fifo + ": a FIFO: expected a YAML config file (a regular file)";
  for (const std::string& args : std::vector<std::string>{
           "check " + fifo, "layout " + fifo,
           "write " + fifo + " --input " + path("in.safetensors") + " --output " + path("out"),
           "bench " + fifo + " --json " + path("b.json")}) {
    SCOPED_TRACE(args);
    expect_one_line(shell("timeout 30 " + kvq_bin() + " " + args), 2, "kvq: " + expected);
  }
  expect_one_line(shell("timeout 30 " + demo() + " --config " + fifo), 2, "kvq-demo: " + expected);
}

// A name too long for the file system and a loop of symbolic links threw from
// std::filesystem::exists: "internal error", exit 1. Now exit 2 and a line naming the path.
TEST_F(HostileCli, ConfigPathsThatNameNoFileExit2NamingThePath) {
  const std::string long_name = path(std::string(300, 'c') + ".yaml");
  expect_one_line(kvq("check " + long_name), 2,
                  "kvq: " + long_name + ": cannot open config file (File name too long)");
  fs::create_symlink(dir_ / "loop.yaml", dir_ / "loop.yaml");
  expect_one_line(kvq("check " + path("loop.yaml")), 2,
                  "kvq: " + path("loop.yaml") +
                      ": cannot open config file (Too many levels of symbolic links)");
  expect_one_line(shell(demo() + " --config " + path("loop.yaml")), 2,
                  "kvq-demo: " + path("loop.yaml") + ": cannot open config file (Too many levels");
  // Below a file, not a folder.
  std::ofstream(dir_ / "plain") << "x";
  expect_one_line(kvq("check " + path("plain") + "/kvq.yaml"), 2,
                  "kvq: " + path("plain") + "/kvq.yaml: ");
  // A folder without search permission (root passes through it, so only checked as another user).
  if (::geteuid() != 0) {
    fs::create_directories(dir_ / "closed");
    std::ofstream(dir_ / "closed" / "kvq.yaml") << "cache: {}\n";
    fs::permissions(dir_ / "closed", fs::perms::none);
    expect_one_line(kvq("check " + path("closed") + "/kvq.yaml"), 2,
                    "kvq: " + path("closed") + "/kvq.yaml: cannot open config file (Permission");
    fs::permissions(dir_ / "closed", fs::perms::owner_all);
  }
}

// A YAML tag asks for a type kvq would not give the value: refused where it is.
TEST_F(HostileCli, YamlTagsAreRefusedNotIgnored) {
  std::ifstream in(config());
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string key = "block_size: ";
  const auto at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + key.size(), "!!float ");
  std::ofstream(dir_ / "tagged.yaml") << text;
  const CliResult r = kvq("check " + path("tagged.yaml"));
  expect_one_line(r, 2, "kvq: " + path("tagged.yaml") + ":");
  EXPECT_NE(r.err.find(": cache.block_size: YAML tag '!!float': expected a plain value without a "
                       "tag\n"),
            std::string::npos)
      << r.err;
}

// `kvq backends > /dev/full` said nothing and exited 0 with its output lost.
TEST_F(HostileCli, AStdoutThatCannotBeWrittenExits1) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string expected = ": cannot write to standard output: No space left on device\n";
  for (const std::string& args :
       std::vector<std::string>{"backends", "check " + config(), "layout " + config()}) {
    SCOPED_TRACE(args);
    // With backend auto, `check` may log the fallback line first (to stderr, which is fine).
    const CliResult r = shell("KVQ_LOG_LEVEL=warn " + kvq_bin() + " " + args, ">/dev/full");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.err, "kvq" + expected);
  }
  const CliResult r = shell(demo() + " --print-config", ">/dev/full");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "kvq-demo" + expected);
}

// Control characters from arguments and the environment are escaped as every other message
// escapes them: an ESC sequence must not reach the terminal. (/bin/sh has no $'...': printf
// makes the ESC.)
TEST_F(HostileCli, ControlCharactersInArgumentsAndTheEnvironmentAreEscaped) {
  CliResult r = shell(demo() + " --devices \"$(printf 'cpu,\\033[31mX')\"");
  expect_one_line(r, 2, "kvq-demo: --devices cpu,\\x1b[31mX: entry 1 is '\\x1b[31mX': expected");
  r = shell(demo() + " --tensor-parallel \"$(printf '\\033[31m2')\"");
  expect_one_line(r, 2, "kvq-demo: ");
  EXPECT_NE(r.err.find("\\x1b[31m2"), std::string::npos) << r.err;
  r = shell(demo() + " --seed \"$(printf '\\033[2J')\"");
  expect_one_line(r, 2,
                  "kvq-demo: --seed: expected an integer in [0, 9223372036854775807], "
                  "found '\\x1b[2J'");
  r = shell("KVQ_LOG_LEVEL=\"$(printf '\\033[31mdebug')\" " + kvq_bin() + " check " + config());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KVQ_LOG_LEVEL=\\x1b[31mdebug: not a log level"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kvq
