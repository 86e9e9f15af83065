#pragma once
// Runs the kvq-demo binary for the end-to-end tests (tests/demo): a fixture with its own temporary
// folder, kvq-demo started with stdout and stderr to files there, KVQ_PLUGIN_PATH under the
// test's control, and the JSON it wrote. The test target defines KVQ_DEMO_BINARY (the kvq-demo
// file) and KVQ_DEMO_DATA (tests/demo/data), this machine's paths; KVQ_BUILD_DIR and
// KVQ_SOURCE_DIR in the environment override them (ctest sets both to the same folders;
// scripts/gpu_session.sh sets them on the GPU machine, where this machine's paths do not exist).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kvq::demo::test {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // keeps the file's key order

struct Outcome {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};

// $`variable`/`relative` when the environment has `variable`, else `compiled_in`.
inline fs::path env_path_or(const char* variable, const char* relative, const char* compiled_in) {
  const char* dir = std::getenv(variable);
  return dir && *dir ? fs::path(dir) / relative : fs::path(compiled_in);
}

inline fs::path demo_binary() {
  return env_path_or("KVQ_BUILD_DIR", "bin/kvq-demo", KVQ_DEMO_BINARY);
}
inline fs::path demo_data() {
  return env_path_or("KVQ_SOURCE_DIR", "tests/demo/data", KVQ_DEMO_DATA);
}

inline std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class DemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvq-demo-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static fs::path data(const std::string& name) { return demo_data() / name; }

  // Starts kvq-demo with `args`, stdout/stderr to files; KVQ_PLUGIN_PATH is `plugin_path` or unset
  // (the caller's environment must not decide which plugins are found).
  pid_t start(const std::vector<std::string>& args, const std::string& plugin_path = "") {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, "KVQ_PLUGIN_PATH=", 16) != 0) env_strings.emplace_back(*e);
    }
    if (!plugin_path.empty()) env_strings.push_back("KVQ_PLUGIN_PATH=" + plugin_path);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string binary = demo_binary().string();
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "cannot start " << binary << ": " << std::strerror(rc);
    return pid;
  }

  Outcome wait(pid_t pid) {
    int raw = 0;
    waitpid(pid, &raw, 0);
    Outcome r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    r.out = slurp(dir_ / "stdout");
    r.err = slurp(dir_ / "stderr");
    return r;
  }

  Outcome run(const std::vector<std::string>& args, const std::string& plugin_path = "") {
    return wait(start(args, plugin_path));
  }

  json run_json(std::vector<std::string> args, const std::string& name = "out.json") {
    const fs::path file = dir_ / name;
    args.push_back("--json");
    args.push_back(file.string());
    const Outcome r = run(args);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
    return json::parse(slurp(file));
  }

  fs::path dir_;
};

// Everything but the timings.
inline json without_timings(json j) {
  j.erase("write_tokens_per_s");
  j.erase("write_seconds");
  j.erase("write_gb_per_s");
  j.erase("wall_s");
  j.erase("gpu_attention_us_per_step");
  j.erase("gpu_attention_seconds");
  j.erase("gpu_attention_gb_per_s");
  return j;
}

// Everything that must not depend on --tensor-parallel: all but the timings, the shards array,
// the timeline and the device line (it names every device the shards use; each shard's own is in
// the shards array), and the GPU attention's calls (one per shard per step), bytes (every shard
// reads the tables) and errors (a GPU attention's kernel may split its work by the shard's head
// count, which changes the f32 rounding: compare those with a tolerance).
inline json without_sharding(json j) {
  j = without_timings(std::move(j));
  j.erase("shards");
  j.erase("timeline");
  j.erase("device");
  j.erase("gpu_attention_calls");
  j.erase("gpu_attention_bytes");
  j.erase("gpu_attention_rel_error");
  j.erase("gpu_attention_cosine");
  return j;
}

// Every head's content hash, in head order, over the shards.
inline std::vector<std::string> head_hashes(const json& j) {
  std::vector<std::string> out;
  for (const json& sh : j["shards"]) {
    for (const json& h : sh["head_fnv1a64"]) out.push_back(h.get<std::string>());
  }
  return out;
}

}  // namespace kvq::demo::test
