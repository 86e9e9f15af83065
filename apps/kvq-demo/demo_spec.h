#pragma once
// The `demo:` section of a config: kvq-demo's workload. The demo reads it itself, through the
// section hook of kvq/io/config.h (ConfigSection), so the config library knows nothing of it; the
// kvq tool links this file too, so that `kvq check` and every command accept and check a config
// written for the demo (apps/common/cli.cpp).
#include <array>
#include <cstdint>
#include <string>

#include "kvq/core/cache_spec.h"
#include "kvq/io/config.h"

namespace kvq::demo {

// Ranges are [min, max], inclusive.
struct DemoSpec {
  int64_t sequences = 12;  // sequences run in all
  int64_t max_batch = 4;   // live at once; new ones are admitted into freed blocks
  std::array<int64_t, 2> prompt_tokens{64, 512};
  std::array<int64_t, 2> decode_tokens{16, 96};
  int64_t query_heads_per_kv_head = 4;  // GQA group size
  uint64_t seed = 1234;
  // On a GPU backend with attention: every this many decode steps (the 1st, the N+1th, ...), the
  // GPU attention's output is compared with f32 attention on the original rows.
  int64_t gpu_attention_check_every = 16;
};

// The largest demo.gpu_attention_check_every.
inline constexpr int64_t kMaxGpuAttentionCheckEvery = int64_t{1} << 30;

// The section's name in the config.
inline constexpr const char* kDemoSection = "demo";

// Reads the section: every key typed and in range, and the longest sequence it allows fitting in
// the config's cache. Throws ConfigError at the key's FILE:LINE:COL.
DemoSpec parse_demo_section(const ConfigSection& section);

// Empty when the longest sequence `demo` allows (prompt_tokens max + decode_tokens max) fits in
// `cache`'s blocks, else what does not fit: a sequence's pages stay in the cache until it ends.
std::string demo_fit_problem(const DemoSpec& demo, const CacheSpec& cache);

}  // namespace kvq::demo
