#pragma once
// The demo's workload from start to report: a paged cache on the chosen backend, sequences
// admitted, prefilled, decoded and freed by the scheduler, every sequence's K/V read back through
// the backend's reader (at finish, before its blocks are freed, or at the end) and attended with
// GQA decode attention on the dequantized and on the original K/V.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "demo_spec.h"
#include "kvq/io/config.h"
#include "report.h"

namespace kvq::demo {

struct RunOptions {
  std::optional<std::string> backend;  // --backend: overrides the config's
  std::optional<uint64_t> seed;        // --seed: overrides demo.seed
  bool verify = false;                 // --verify: the same writes through reference_cpu too
  bool progress = true;                // a progress bar / lines on stderr
  int64_t tensor_parallel = 1;         // --tensor-parallel: KV-head shards, one writer each
  std::vector<Device> devices;         // --devices: one per shard; empty = counted up (see below)
  bool timeline = false;               // --timeline: per-shard write timestamps in the result
  std::optional<DemoSpec> section;     // the config's demo: section, when it has one
};

// The demo section in effect: options.section, or DemoSpec's defaults when the config has none;
// with options.seed applied. Throws ConfigError (at demo.prompt_tokens, or cache.num_blocks when
// the config has no demo section) when the longest sequence the section allows does not fit in the
// cache.
DemoSpec demo_spec(const Config& cfg, const RunOptions& options);

// Runs the whole demo. Throws kvq::Error (exit 2 for bad config or backend, a --tensor-parallel
// that does not divide cache.num_kv_heads, --devices with another count than shards or a device
// the backend refuses; 1 for failures while running) or Interrupted (Ctrl-C).
// Shards run on options.devices, or without them on the device the backend resolves the config's
// `device` to and the ones after it (tensor_parallel.h's shard_devices); every non-timing number
// and the cache content hash are the same for any number of shards.
DemoResult run_demo(const Config& cfg, const RunOptions& options);

}  // namespace kvq::demo
