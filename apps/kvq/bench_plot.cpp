#include "bench_plot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ranges>
#include <string>

#include "kvq/core/status.h"

extern char** environ;

namespace kvq::app::bench {
namespace fs = std::filesystem;
namespace {

constexpr const char* kScriptName = "plot_bench.py";
constexpr const char* kInstallHint =
    "install python3 and matplotlib (Debian/Ubuntu: apt-get install python3 python3-matplotlib; "
    "scripts/install-deps.sh does it)";

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

// python3 found through PATH, or empty.
fs::path find_python() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const fs::path dir(std::string(rest.substr(0, colon)));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    std::error_code ec;
    const fs::path candidate = (dir.empty() ? fs::path(".") : dir) / "python3";
    if (fs::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return {};
}

// Runs argv[0] with argv; returns its exit status (128 + signal when killed).
int spawn_and_wait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); err != 0) {
    throw Error(ErrorCode::runtime,
                "could not start " + args[0] + ": " + std::string(std::strerror(err)));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) {
    throw Error(ErrorCode::runtime, "waiting for " + args[0] + ": " + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// "a, b, c" (fmt's own path formatter would quote each one).
std::string join_paths(const std::vector<fs::path>& paths) {
  return fmt::format(
      "{}",
      fmt::join(paths | std::views::transform([](const fs::path& p) { return p.string(); }), ", "));
}

}  // namespace

std::vector<fs::path> plot_script_candidates() {
  std::vector<fs::path> out;
  const fs::path dir = executable_dir();
  if (!dir.empty()) {
    out.push_back((dir / ".." / "share" / "kvq" / kScriptName).lexically_normal());
    out.push_back((dir / ".." / ".." / "scripts" / kScriptName).lexically_normal());
  }
#ifdef KVQ_SOURCE_SCRIPTS_DIR
  out.push_back(fs::path(KVQ_SOURCE_SCRIPTS_DIR) / kScriptName);
#endif
  return out;
}

fs::path find_plot_script() {
  const std::vector<fs::path> candidates = plot_script_candidates();
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  throw Error(ErrorCode::not_found, std::string("--plot: ") + kScriptName +
                                        " not found (searched " + join_paths(candidates) + ")");
}

fs::path find_plot_python(const fs::path& script) {
  std::vector<fs::path> pythons;
  if (fs::path on_path = find_python(); !on_path.empty()) pythons.push_back(on_path);
  std::error_code ec;
  if (fs::path system("/usr/bin/python3");
      fs::is_regular_file(system, ec) && (pythons.empty() || pythons[0] != system)) {
    pythons.push_back(system);
  }
  if (pythons.empty()) {
    throw Error(ErrorCode::unavailable,
                std::string("--plot needs python3, which is not on PATH: ") + kInstallHint);
  }
  for (const fs::path& python : pythons) {
    if (spawn_and_wait({python.string(), script.string(), "--check"}) == 0) return python;
  }
  throw Error(ErrorCode::unavailable,
              "--plot needs matplotlib, which no python3 can import (tried " + join_paths(pythons) +
                  "): " + kInstallHint);
}

void run_plot(const fs::path& python, const fs::path& script, const fs::path& json,
              const fs::path& png) {
  const int status =
      spawn_and_wait({python.string(), script.string(), json.string(), png.string()});
  if (status != 0) {
    throw Error(ErrorCode::runtime, "--plot: " + python.string() + " " + script.string() +
                                        " exited with status " + std::to_string(status) +
                                        " drawing " + png.string());
  }
}

}  // namespace kvq::app::bench
