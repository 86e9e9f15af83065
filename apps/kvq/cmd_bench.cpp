// kvq bench CONFIG: times the configured backend's write and read over a sweep of shapes and
// batch sizes against the device's own copy bandwidth (issue 7). The layout (order, scale
// arrangements) and scales come from the config; the geometry is the sweep's.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "../common/backend_select.h"
#include "bench_plan.h"
#include "bench_plot.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "commands.h"
#include "kvq/core/logging.h"

namespace kvq::app {
namespace {

struct BenchFlags {
  std::string config;
  std::string json;
  std::string plot;
  std::string shapes;
  std::string backend;
  std::string tokens;
  std::string threads;
  int32_t iterations = 0;  // 0: automatic
};

constexpr uint64_t kGpuCopyBytes = uint64_t{1} << 30;
constexpr uint64_t kCpuCopyBytes = uint64_t{256} << 20;

std::string command_line(const BenchFlags& f) {
  std::string s = "kvq bench " + f.config;
  auto add = [&](const char* flag, const std::string& v) {
    if (!v.empty()) s += std::string(" ") + flag + " " + v;
  };
  add("--backend", f.backend);
  add("--shapes", f.shapes);
  add("--tokens", f.tokens);
  add("--threads", f.threads);
  if (f.iterations > 0) add("--iterations", std::to_string(f.iterations));
  add("--json", f.json);
  add("--plot", f.plot);
  return s;
}

bench::Settings settings_for(bool cpu, const BenchFlags& f) {
  bench::Settings s;
  if (f.iterations > 0) s.iterations = f.iterations;
  if (cpu) {
    // A CPU write of thousands of tokens takes tens of milliseconds: one warm-up, and at most
    // half a second per timing, so the default sweep ends in well under a minute.
    s.warmup = 1;
    s.budget_ms = 500;
    s.min_iterations = 3;
  }
  return s;
}

void write_json(const std::filesystem::path& file, const nlohmann::json& doc) {
  std::ofstream out(file);
  out << doc.dump(1) << "\n";
  if (!out) throw Error(ErrorCode::io, file.string() + ": cannot write the bench results");
}

int run_bench(const BenchFlags& f) {
  Config cfg = load_checked_config(f.config).config;
  apply_logging(cfg);

  std::filesystem::path plot_script, plot_python;
  if (!f.plot.empty()) {  // before the run, not after it
    plot_script = bench::find_plot_script();
    plot_python = bench::find_plot_python(plot_script);
  }
  if (!f.json.empty()) {  // fail now on an unwritable path, not after minutes of timing
    std::ofstream probe(f.json);
    if (!probe) throw Error(ErrorCode::io, f.json + ": cannot write the bench results");
  }

  bench::PlanRequest request;
  if (!f.shapes.empty()) request.shapes = bench::parse_shapes(f.shapes);
  if (!f.tokens.empty()) request.tokens = bench::parse_positive_list(f.tokens, "--tokens");

  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  std::shared_ptr<DeviceRuntime> runtime = opened.backend.make_runtime(opened.options);
  request.cpu = runtime->device().type == DeviceType::cpu;
  if (!f.threads.empty()) {
    if (!request.cpu) {
      throw Error(ErrorCode::invalid_argument, "--threads: backend " + opened.backend.info().name +
                                                   " runs on " + to_string(runtime->device()) +
                                                   "; thread counts apply to CPU backends only");
    }
    std::vector<int32_t> threads;
    for (int64_t n : bench::parse_positive_list(f.threads, "--threads")) {
      threads.push_back(static_cast<int32_t>(n));
    }
    request.threads = threads;
  }

  bench::RunInfo info;
  info.command = command_line(f);
  info.date = bench::utc_now_iso8601();
  info.config_file = f.config;
  info.backend = opened.backend.info().name;
  info.backend_version = opened.backend.info().version;
  info.cache = opened.options.cache;
  info.device = runtime->device();
  info.device_name = runtime->device_name();
  info.settings = settings_for(request.cpu, f);
  info.copy_bytes = request.cpu ? kCpuCopyBytes : kGpuCopyBytes;
  throw_if_error(runtime->copy_bandwidth(info.copy_bytes, &info.copy_bytes_per_s));

  const std::vector<bench::Case> plan = bench::make_plan(request);
  std::cerr << fmt::format("kvq bench: {} cases on {} ({}), copy bandwidth {:.1f} GB/s\n",
                           plan.size(), info.device_name, info.backend,
                           info.copy_bytes_per_s / 1e9);

  bench::Target target;
  target.runtime = runtime.get();
  target.base = opened.options;
  const Backend& backend = opened.backend;
  target.make_writer = [&backend](const BackendOptions& o) { return backend.make_writer(o); };
  target.make_reader = [&backend](const BackendOptions& o) { return backend.make_reader(o); };

  std::vector<bench::CaseResult> results;
  int failed = 0;
  {
    bench::CaseRunner runner(target, info.settings);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      results.push_back(runner.run(plan[i]));
      failed += results.back().error.empty() ? 0 : 1;
      std::cerr << bench::progress_line(i, plan.size(), results.back(), info.copy_bytes_per_s)
                << std::endl;
      if (!f.json.empty()) write_json(f.json, bench::to_json(info, results, false));
    }
  }

  bench::print_table(std::cout, info, results);
  const nlohmann::json doc = bench::to_json(info, results);
  if (!f.json.empty()) write_json(f.json, doc);
  if (!f.plot.empty()) {
    std::filesystem::path json_file = f.json;
    if (json_file.empty()) {
      json_file = std::filesystem::path(f.plot).replace_extension(".json");
      write_json(json_file, doc);
    }
    bench::run_plot(plot_python, plot_script, json_file, f.plot);
    std::cerr << "kvq bench: plot written to " << f.plot << "\n";
  }
  if (failed > 0) {
    std::cerr << "kvq bench: " << failed << " of " << plan.size() << " cases failed\n";
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "bench", "Time the backend's write and read over a sweep of shapes against copy bandwidth");
  auto f = std::make_shared<BenchFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (layout, scales, backend)")->required();
  sub->add_option("--json", f->json, "Write every number to this JSON file");
  sub->add_option("--plot", f->plot,
                  "Draw GB/s against T per shape into this PNG (python3 + matplotlib)");
  sub->add_option("--shapes", f->shapes,
                  "HEADSxHEAD_SIZE[xBLOCK_SIZE],... (default: 8x128,1x128,4x128,8x64,8x256,"
                  "32x128; block sizes 16, and 64, 128 for 8x128)");
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's");
  sub->add_option("--tokens", f->tokens,
                  "Token counts T,... (default 1,16,64,256,1024,4096,16384,65536; CPU: up to "
                  "4096)");
  sub->add_option("--iterations", f->iterations,
                  "Timed runs per case (default 50, fewer for slow CPU cases)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--threads", f->threads, "CPU backends: thread counts to time (default 1,2)");
  sub->callback([&run, f] { run = [f] { return run_bench(*f); }; });
}

}  // namespace kvq::app
