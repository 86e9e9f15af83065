#pragma once
// The demo's workload from start to report: a paged cache on the chosen backend, sequences
// admitted, prefilled, decoded and freed by the scheduler, every sequence's K/V read back through
// the backend's reader (at finish, before its blocks are freed, or at the end) and attended with
// GQA decode attention on the dequantized and on the original K/V.
#include <cstdint>
#include <optional>
#include <string>

#include "kvq/core/config.h"
#include "report.h"

namespace kvq::demo {

struct RunOptions {
  std::optional<std::string> backend;  // --backend: overrides the config's
  std::optional<uint64_t> seed;        // --seed: overrides demo.seed
  bool verify = false;                 // --verify: the same writes through reference_cpu too
  bool progress = true;                // a progress bar / lines on stderr
};

// The demo section in effect: the config's, or DemoSpec's defaults when it has none; with
// options.seed applied. Throws ConfigError (at demo.prompt_tokens, or cache.num_blocks when the
// config has no demo section) when the longest sequence the section allows does not fit in the
// cache.
DemoSpec demo_spec(const Config& cfg, const RunOptions& options);

// Runs the whole demo. Throws kvq::Error (exit 2 for bad config or backend, 1 for failures while
// running) or Interrupted (Ctrl-C).
DemoResult run_demo(const Config& cfg, const RunOptions& options);

}  // namespace kvq::demo
