// kvq bench CONFIG: times the configured backend's write and read over a sweep of shapes and
// batch sizes against the device's own copy bandwidth (issue 7). The layout (order, scale
// arrangements) and scales come from the config; the geometry is the sweep's.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "bench_attention.h"
#include "bench_plan.h"
#include "bench_plot.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "commands.h"
#include "kvq/core/logging.h"
#include "kvq/core/page_layout.h"
#include "kvq/io/file_io.h"
#include "kvq/io/open_backend.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq::app {
namespace {

struct BenchFlags {
  std::shared_ptr<CommonFlags> common;
  std::string config;
  std::string json;
  std::string plot;
  std::string shapes;
  std::string backend;
  std::string tokens;
  std::string threads;
  int32_t iterations = 0;            // 0: the default, bench::Settings::iterations
  std::optional<int64_t> fused_qkv;  // query heads; unset: K and V apart
  // --attention and its sweep (bench_attention.h); empty lists: the default sweep.
  bool attention = false;
  std::string seqs, contexts, groups, formats;
  double max_cache_gib = 48;
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
  if (f.fused_qkv) add("--fused-qkv", std::to_string(*f.fused_qkv));
  if (f.attention) {  // the sweep the numbers are of, so the JSON alone can rerun it
    s += " --attention";
    add("--seqs", f.seqs);
    add("--contexts", f.contexts);
    add("--gqa", f.groups);
    add("--formats", f.formats);
    if (f.max_cache_gib != BenchFlags{}.max_cache_gib) {
      add("--max-cache-gib", fmt::format("{}", f.max_cache_gib));
    }
  }
  add("--json", f.json);
  add("--plot", f.plot);
  return s;
}

bench::Settings settings_for(bool cpu, const BenchFlags& f) {
  bench::Settings s;
  if (f.iterations > 0) s.iterations = f.iterations;
  s.fused_qkv_query_heads = f.fused_qkv;
  // A CPU write of thousands of tokens takes tens of milliseconds: one warm-up, which also
  // touches every page of its buffers. Timed runs stay 50, as issue 7 asks of every backend.
  if (cpu) s.warmup = 1;
  return s;
}

// Whole or not at all: rewritten after every case, so an interrupted run leaves the last whole
// one.
void write_json(const std::filesystem::path& file, const nlohmann::json& doc) {
  write_file_atomically(file, doc.dump(1) + "\n");
}

// The sweep's shapes with the config's layout: a geometry the layout refuses (head_size not a
// multiple of 64 for sm100_swizzled scales, ...) is a usage error before any timing, not a failed
// case after it.
void check_shapes(const std::vector<bench::Case>& plan, const CacheSpec& base) {
  for (const bench::Case& c : plan) {
    CacheSpec spec = base;
    spec.num_kv_heads = c.num_kv_heads;
    spec.head_size = c.head_size;
    spec.block_size = c.block_size;
    spec.num_blocks = 1;
    try {
      (void)make_layout(spec);
    } catch (const Error& e) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("--shapes: {}x{}x{} (heads x head_size x block_size): {}",
                              c.num_kv_heads, c.head_size, c.block_size, e.what()));
    }
  }
}

// Where the numbers of a --plot go: --json, else FILE.json beside the picture (a plot is kept
// with the figures it shows).
std::filesystem::path plot_json(const BenchFlags& f) {
  return f.json.empty() ? std::filesystem::path(f.plot).replace_extension(".json")
                        : std::filesystem::path(f.json);
}

// The picture is a PNG under the name given (matplotlib would pick the format from any other
// extension, or append .png to none), and never the file that keeps the numbers.
void check_plot_path(const BenchFlags& f) {
  std::string ext = std::filesystem::path(f.plot).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".png") {
    throw Error(ErrorCode::invalid_argument,
                "--plot: expected a file name ending in .png, found '" + f.plot + "'");
  }
  check_distinct(f.plot, "--plot", f.json, "--json");
}

// kvq bench --attention: the decode-attention sweep (bench_attention.h), table, JSON and plot
// (plot_python empty: none asked for).
int run_attention_bench(const BenchFlags& f, const Config& cfg,
                        const std::filesystem::path& plot_script,
                        const std::filesystem::path& plot_python) {
  bench::AttentionSweep sweep;
  if (!f.seqs.empty()) sweep.num_seqs = bench::parse_positive_list(f.seqs, "--seqs", 65535);
  if (!f.contexts.empty()) {
    sweep.contexts = bench::parse_positive_list(f.contexts, "--contexts", int64_t{1} << 30);
  }
  if (!f.groups.empty()) sweep.groups = bench::parse_positive_list(f.groups, "--gqa", 64);
  if (!f.formats.empty()) {
    sweep.formats.clear();
    std::string_view rest = f.formats;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      sweep.formats.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    // Refused before any timing, as every other flag is.
    const std::vector<std::string> known = known_formats();
    for (const std::string& format : sweep.formats) {
      if (std::find(known.begin(), known.end(), format) == known.end()) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("--formats: '{}' in '{}': expected a comma-separated list of {}",
                                format, f.formats, fmt::join(known, ", ")));
      }
    }
  }
  if (f.iterations > 0) sweep.iterations = f.iterations;
  sweep.max_cache_bytes = static_cast<uint64_t>(f.max_cache_gib * 1073741824.0);
  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  const std::string& name = opened.backend.info().name;
  if (!opened.backend.has_attention()) {
    throw Error(ErrorCode::unavailable,
                "--attention: backend " + name + " has no decode attention");
  }
  std::shared_ptr<DeviceRuntime> runtime =
      at_config_keys(cfg, [&] { return opened.backend.make_runtime(opened.options); });
  double copy_bps = 0;
  throw_if_error(runtime->copy_bandwidth(kGpuCopyBytes, &copy_bps));
  std::cerr << fmt::format("kvq bench --attention: {} ({}), copy bandwidth {:.1f} GB/s\n",
                           runtime->device_name(), name, copy_bps / 1e9);
  const auto results = bench::run_attention_sweep(opened.backend, opened.options, sweep, std::cerr);
  bench::print_attention_table(std::cout, results, copy_bps);
  if (!f.json.empty() || !f.plot.empty()) {
    nlohmann::json doc = bench::attention_json(results, sweep, runtime->device_name(), copy_bps);
    doc["command"] = command_line(f);
    doc["backend"] = name;
    doc["date"] = bench::utc_now_iso8601();
    const std::filesystem::path json = plot_json(f);
    write_json(json, doc);
    std::cerr << "kvq bench: numbers written to " << json.string() << "\n";
    if (!f.plot.empty()) {
      bench::run_plot(plot_python, plot_script, json, f.plot);
      std::cerr << "kvq bench: plot written to " << f.plot << "\n";
    }
  }
  const bool failed =
      std::any_of(results.begin(), results.end(), [](const auto& r) { return !r.error.empty(); });
  return failed ? kExitRuntime : kExitOk;
}

int run_bench(const BenchFlags& f) {
  Config cfg = load_checked_config(f.config).config;
  apply_logging(cfg, *f.common);

  std::filesystem::path plot_script, plot_python;
  if (!f.plot.empty()) {  // before the run, not after it
    check_plot_path(f);
    plot_script = bench::find_plot_script();
    plot_python = bench::find_plot_python(plot_script);
  }
  // Fail now on an output that cannot be written, or would replace the config, not after minutes
  // of timing.
  if (!f.json.empty()) {
    check_distinct(f.json, "--json", f.config, "CONFIG");
    check_writable(f.json, "--json");
  }
  if (!f.plot.empty()) {
    check_distinct(f.plot, "--plot", f.config, "CONFIG");
    check_distinct(plot_json(f), "--plot's JSON", f.config, "CONFIG");
    check_writable(f.plot, "--plot");
    check_writable(plot_json(f), "--plot's JSON");
  }

  if (f.attention) return run_attention_bench(f, cfg, plot_script, plot_python);

  bench::PlanRequest request;
  if (!f.shapes.empty()) request.shapes = bench::parse_shapes(f.shapes);
  if (!f.tokens.empty()) {
    request.tokens = bench::parse_positive_list(f.tokens, "--tokens", bench::kMaxTokens);
  }

  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  std::shared_ptr<DeviceRuntime> runtime =
      at_config_keys(cfg, [&] { return opened.backend.make_runtime(opened.options); });
  request.cpu = runtime->device().type == DeviceType::cpu;
  if (!f.threads.empty()) {
    if (!request.cpu) {
      throw Error(ErrorCode::invalid_argument, "--threads: backend " + opened.backend.info().name +
                                                   " runs on " + to_string(runtime->device()) +
                                                   "; thread counts apply to CPU backends only");
    }
    std::vector<int32_t> threads;
    for (int64_t n : bench::parse_positive_list(f.threads, "--threads", Config::kMaxThreads)) {
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
  info.cache = PageLayout::resolved(opened.options.cache);
  info.device = runtime->device();
  info.device_name = runtime->device_name();
  info.settings = settings_for(request.cpu, f);
  info.copy_bytes = request.cpu ? kCpuCopyBytes : kGpuCopyBytes;
  throw_if_error(runtime->copy_bandwidth(info.copy_bytes, &info.copy_bytes_per_s));

  const std::vector<bench::Case> plan = bench::make_plan(request);
  check_shapes(plan, opened.options.cache);
  std::cerr << fmt::format("kvq bench: {} cases on {} ({}), copy bandwidth {:.1f} GB/s\n",
                           plan.size(), info.device_name, info.backend,
                           info.copy_bytes_per_s / 1e9);

  bench::Target target;
  target.runtime = runtime.get();
  target.base = opened.options;
  const Backend& backend = opened.backend;
  target.make_writer = [&backend](const BackendOptions& o) { return backend.make_writer(o); };
  target.make_reader = [&backend](const BackendOptions& o) { return backend.make_reader(o); };

  // The numbers go out after every case (marked incomplete until the last), so a run cut short
  // keeps what it measured: to --json, else to the JSON a --plot keeps beside its picture.
  const std::string json_out =
      f.json.empty() && f.plot.empty() ? std::string() : plot_json(f).string();
  std::vector<bench::CaseResult> results;
  int failed = 0;
  // The numbers appear once, in the table. On a terminal the progress (with the case's numbers)
  // is one line rewritten in place and erased before the table; elsewhere (a log, a pipe, where
  // stderr and stdout often meet) each case gets a line saying it is done, or why it failed.
  const bool live = ::isatty(STDERR_FILENO) != 0;
  {
    bench::CaseRunner runner(target, info.settings);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      results.push_back(runner.run(plan[i]));
      failed += results.back().error.empty() ? 0 : 1;
      // The numbers are on disk before the line that says the case is done.
      if (!json_out.empty()) write_json(json_out, bench::to_json(info, results, false));
      const std::string line =
          bench::progress_line(i, plan.size(), results.back(), info.copy_bytes_per_s);
      if (live) {
        std::cerr << "\r\x1b[K" << line << std::flush;
      } else if (!results.back().error.empty()) {
        std::cerr << line << std::endl;
      } else {
        std::cerr << line.substr(0, line.find(": ")) << ": done" << std::endl;
      }
    }
    if (live) std::cerr << "\r\x1b[K" << std::flush;
  }

  bench::print_table(std::cout, info, results);
  if (!json_out.empty()) {
    write_json(json_out, bench::to_json(info, results));
    if (!f.json.empty()) std::cerr << "kvq bench: numbers written to " << f.json << "\n";
  }
  if (!f.plot.empty()) {
    bench::run_plot(plot_python, plot_script, plot_json(f), f.plot);
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
  sub->add_option("CONFIG", f->config, "YAML config (layout, scales, backend)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--json", f->json, "Write every number to this JSON file")
      ->check(kNonEmpty)
      ->type_name("FILE");
  sub->add_option("--plot", f->plot,
                  "Draw GB/s against T per shape into this PNG (python3 + matplotlib); without "
                  "--json its numbers go to the same name with .json")
      ->check(kNonEmpty)
      ->type_name("FILE");
  sub->add_option("--shapes", f->shapes,
                  "HEADSxHEAD_SIZE[xBLOCK_SIZE],... (default: 8x128,1x128,4x128,8x64,8x256,"
                  "32x128; block sizes 16, and 64, 128 for 8x128; CPU: 8x128x16,1x128x16)")
      ->check(kNonEmpty)
      ->type_name("SHAPES");
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's")
      ->check(kNonEmpty)
      ->type_name("NAME");
  sub->add_option("--tokens", f->tokens,
                  "Token counts T,... each at most 2147483647 = 2^31-1 (default 1,16,64,256,"
                  "1024,4096,16384,65536; CPU: up to 4096)")
      ->check(kNonEmpty)
      ->type_name("T,...");
  sub->add_option("--iterations", f->iterations, "Timed runs per case (default 50)")
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--fused-qkv", f->fused_qkv,
                  "K and V as views of one fused QKV projection output [T, (QUERY_HEADS + 2H) x "
                  "D], as engines pass them (default: two contiguous [T, H, D] tensors)")
      ->option_text("QUERY_HEADS")
      ->check(CLI::Range(int64_t{0}, bench::kMaxFusedQueryHeads));
  sub->add_option("--threads", f->threads, "CPU backends: thread counts to time (default 1,2)")
      ->check(kNonEmpty)
      ->type_name("N,...");
  sub->add_flag("--attention", f->attention,
                "Time decode attention instead: num_seqs x context per cache format, GQA 4 and 8 "
                "(H 8, D 128, block 16), against copy bandwidth");
  sub->add_option("--seqs", f->seqs, "--attention: num_seqs to time (default 1,8,32,128)")
      ->check(kNonEmpty)
      ->type_name("N,...");
  sub->add_option("--contexts", f->contexts,
                  "--attention: context lengths to time (default 512,4096,32768,131072)")
      ->check(kNonEmpty)
      ->type_name("N,...");
  sub->add_option("--gqa", f->groups, "--attention: query heads per kv head (default 4,8)")
      ->check(kNonEmpty)
      ->type_name("G,...");
  sub->add_option("--formats", f->formats,
                  "--attention: cache formats (default nvfp4,fp8_e4m3,fp8_e5m2,bf16)")
      ->check(kNonEmpty)
      ->type_name("F,...");
  sub->add_option("--max-cache-gib", f->max_cache_gib,
                  "--attention: skip cases whose cache is larger (default 48)")
      ->check(CLI::Range(0.001, 1e6));
  f->common = add_common_flags(*sub);
  sub->callback([&run, f] { run = [f] { return run_bench(*f); }; });
}

}  // namespace kvq::app
