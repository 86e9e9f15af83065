#pragma once
// `kvq bench --plot FILE.png`: runs scripts/plot_bench.py (python3 + matplotlib) on the JSON.
// The script is found next to the program: bin/../share/kvq/ when installed, the source tree's
// scripts/ for a build tree (bin/../../scripts, or the folder compiled in as
// KVQ_SOURCE_SCRIPTS_DIR).
#include <filesystem>
#include <vector>

namespace kvq::app::bench {

// The places searched, in order.
std::vector<std::filesystem::path> plot_script_candidates();

// The first candidate that exists; throws kvq::Error(not_found) listing the places searched.
std::filesystem::path find_plot_script();

// The first python3 that can import matplotlib (runs `PYTHON SCRIPT --check`): the one on PATH,
// then /usr/bin/python3 (Debian's python3-matplotlib serves only the system interpreter, and a
// pyenv or venv python3 may come first on PATH). Throws kvq::Error(unavailable) saying what to
// install. Call it before a long run.
std::filesystem::path find_plot_python(const std::filesystem::path& script);

// Runs `PYTHON SCRIPT JSON PNG`; throws kvq::Error(runtime) when it fails.
void run_plot(const std::filesystem::path& python, const std::filesystem::path& script,
              const std::filesystem::path& json, const std::filesystem::path& png);

}  // namespace kvq::app::bench
