// kvq-demo: what kvq does, what it saves and what it costs, in one command. With no arguments it
// runs an embedded default config; see apps/kvq-demo/README.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "default_config.h"
#include "demo_run.h"
#include "interrupt.h"
#include "kvq/core/page_layout.h"
#include "kvq/io/file_io.h"
#include "report.h"
#include "tensor_parallel.h"

namespace {

// --seed: the range demo.seed allows, [0, 2^63 - 1]; anything else is bad usage (exit 2), never
// wrapped or clamped.
uint64_t parse_seed(const std::string& word) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (word.empty() || ec != std::errc() || end != word.data() + word.size() || v < 0) {
    throw kvq::Error(kvq::ErrorCode::invalid_argument,
                     "--seed: expected an integer in [0, 9223372036854775807], found '" +
                         kvq::message_text(word) + "'");
  }
  return static_cast<uint64_t>(v);
}

// --formats: comma-separated cache formats, each one kvq knows, none twice.
std::vector<std::string> parse_formats(const std::string& list) {
  std::vector<std::string> out;
  const std::vector<std::string> known = kvq::known_formats();
  std::string known_text;
  for (const auto& k : known) known_text += (known_text.empty() ? "" : ", ") + k;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string word = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (std::find(known.begin(), known.end(), word) == known.end()) {
      throw kvq::Error(kvq::ErrorCode::invalid_argument,
                       "--formats: unknown format '" + kvq::message_text(word) +
                           "': expected a comma-separated list of " + known_text);
    }
    if (std::find(out.begin(), out.end(), word) != out.end()) {
      throw kvq::Error(kvq::ErrorCode::invalid_argument, "--formats: '" + word + "' given twice");
    }
    out.push_back(word);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// The config for one format of --formats: the same cache, in `format`. Scale arrangements only
// where the format has scales; the config's scales for its own format, 1 for the others (a scale
// calibrated for one format's rule is wrong for another's, and bf16 takes none).
kvq::Config config_for_format(const kvq::Config& base, const std::string& format) {
  kvq::Config cfg = base;
  cfg.cache.format = format;
  if (format != base.cache.format) {
    cfg.cache.k_scale = cfg.cache.v_scale = 1.0f;
    if (format != "nvfp4") cfg.cache.layout.k_scales = cfg.cache.layout.v_scales = "";
  }
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvq;
  demo::install_interrupt_handler();

  CLI::App app{
      "kvq-demo: writes a decode workload's K/V into an NVFP4 paged cache through a backend "
      "plugin, reads it back and reports memory saved, accuracy and write throughput",
      "kvq-demo"};
  std::string config_path, backend, json_path, seed_word, devices_word, formats_word;
  bool verify = false, print_config = false, timeline = false;
  // An int, so CLI11 refuses a value that overflows it (an int64_t took 1e23 as INT64_MAX).
  int tensor_parallel = 1;
  auto* config_opt =
      app.add_option("--config", config_path,
                     "YAML config (configs/*.yaml); without it, the embedded default")
          ->check(app::kNonEmpty)
          ->type_name("FILE");
  auto* backend_opt =
      app.add_option("--backend", backend, "backend plugin by name (overrides the config's)")
          ->check(app::kNonEmpty)
          ->type_name("NAME");
  auto* json_opt =
      app.add_option("--json", json_path, "also write the numbers as JSON to this file")
          ->check(app::kNonEmpty)
          ->type_name("FILE");
  auto* seed_opt =
      app.add_option("--seed", seed_word, "seed of the workload, 0..2^63-1 (overrides demo.seed)")
          ->check(app::kNonEmpty)
          ->type_name("N");
  auto* verify_opt =
      app.add_flag("--verify", verify,
                   "also write everything through reference_cpu and compare every cache byte "
                   "(exit 1 if any differs)");
  auto* tp_opt =
      app.add_option("--tensor-parallel", tensor_parallel,
                     "split the KV heads into N contiguous shards, one writer (runtime, stream, "
                     "cache) each; N must divide cache.num_kv_heads (default 1)");
  auto* devices_opt =
      app.add_option(
             "--devices", devices_word,
             "one device per shard, comma separated: CUDA ordinals (0,1), cuda:N or cpu; the same "
             "one "
             "twice puts two shards on it (default: cuda:K, cuda:K+1, ... from the config's device "
             "on a GPU backend, the CPU on a CPU backend)")
          ->check(app::kNonEmpty)
          ->type_name("DEVICES");
  auto* timeline_opt =
      app.add_flag("--timeline", timeline,
                   "also print (and put in --json) each shard's write timestamps: when the writes "
                   "of different shards overlapped");
  auto* formats_opt =
      app.add_option("--formats", formats_word,
                     "run the same workload through each cache format of LIST (e.g. "
                     "bf16,fp8_e4m3,nvfp4) and print one table: bytes per token, capacity, "
                     "errors, write throughput")
          ->check(app::kNonEmpty)
          ->type_name("LIST")
          ->excludes(tp_opt)
          ->excludes(devices_opt)
          ->excludes(timeline_opt);
  // Alone: it runs nothing, so any option given with it would be silently ignored.
  app.add_flag("--print-config", print_config, "print the embedded default config and exit")
      ->excludes(config_opt)
      ->excludes(backend_opt)
      ->excludes(json_opt)
      ->excludes(seed_opt)
      ->excludes(verify_opt)
      ->excludes(tp_opt)
      ->excludes(devices_opt)
      ->excludes(timeline_opt)
      ->excludes(formats_opt);

  const auto common = app::add_common_flags(app, ", 128+N interrupted by signal N");

  app::Runner run = [&]() -> int {
    if (print_config) {
      std::cout << demo::kDefaultConfig;
      return app::kExitOk;
    }
    // A --json that cannot be written, or would replace the config, would fail only after the
    // whole run.
    if (json_opt->count()) {
      check_distinct(json_path, "--json", config_path, "--config");
      check_writable(json_path, "--json");
    }
    try {
      demo::RunOptions options;
      Config cfg =
          (config_path.empty() ? app::parse_checked_config(demo::kDefaultConfig,
                                                           std::string(demo::kDefaultConfigSource),
                                                           &options.section)
                               : app::load_checked_config(config_path, &options.section))
              .config;
      app::apply_logging(cfg, *common);
      if (backend_opt->count()) options.backend = backend;
      if (seed_opt->count()) options.seed = parse_seed(seed_word);
      options.verify = verify;
      options.tensor_parallel = tensor_parallel;
      if (devices_opt->count()) options.devices = demo::parse_device_list(devices_word);
      options.timeline = timeline;
      if (formats_opt->count()) {
        const std::vector<std::string> formats = parse_formats(formats_word);
        const uint64_t budget = PageLayout::from_spec(cfg.cache).cache_bytes();
        std::vector<demo::DemoResult> results;
        for (const std::string& format : formats) {
          std::cerr << "kvq-demo: running the workload in " << format << "\n";
          results.push_back(demo::run_demo(config_for_format(cfg, format), options));
        }
        demo::print_format_table(std::cout, results, budget);
        std::cout.flush();
        if (json_opt->count()) {
          demo::write_file_atomically(json_path,
                                      demo::formats_json(results, budget).dump(2) + "\n");
          std::cerr << "kvq-demo: numbers written to " << json_path << "\n";
        }
        for (const demo::DemoResult& r : results) {
          if (r.blocks_leaked != 0 || (r.verify && r.verify->differing_bytes != 0)) {
            std::cerr << "kvq-demo: " << r.format << ": "
                      << (r.blocks_leaked != 0 ? "blocks leaked" : "--verify found differences")
                      << "\n";
            return app::kExitRuntime;
          }
        }
        return app::kExitOk;
      }
      const demo::DemoResult result = demo::run_demo(cfg, options);
      demo::print_report(std::cout, result);
      demo::print_timeline(std::cout, result);
      std::cout.flush();
      if (json_opt->count()) {
        demo::write_file_atomically(json_path, demo::to_json(result).dump(2) + "\n");
        std::cerr << "kvq-demo: numbers written to " << json_path << "\n";
      }
      if (result.blocks_leaked != 0) {
        std::cerr << "kvq-demo: " << result.blocks_leaked
                  << " blocks are leaked or owned twice at the end (a scheduler bug)\n";
        return app::kExitRuntime;
      }
      if (result.verify && result.verify->differing_bytes != 0) {
        std::cerr << "kvq-demo: --verify: " << result.verify->differing_bytes << " of "
                  << result.verify->bytes_compared << " cache bytes differ between "
                  << result.backend << " and " << result.verify->reference << " (first at byte "
                  << result.verify->first_difference << ")\n";
        return app::kExitRuntime;
      }
      return app::kExitOk;
    } catch (const demo::Interrupted&) {
      std::cerr << "kvq-demo: interrupted\n";
      return demo::interrupted_exit_status();
    }
  };
  return app::run_main(app, run, argc, argv);
}
