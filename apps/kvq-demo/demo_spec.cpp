#include "demo_spec.h"

#include <fmt/format.h>

#include <limits>

namespace kvq::demo {

DemoSpec parse_demo_section(const ConfigSection& s) {
  s.only_keys({"sequences", "max_batch", "prompt_tokens", "decode_tokens",
               "query_heads_per_kv_head", "seed", "gpu_attention_check_every"});
  DemoSpec d;
  constexpr int64_t kMaxTokens = 1 << 24;
  if (s.has("sequences")) d.sequences = s.integer("sequences", 1, 1 << 20);
  if (s.has("max_batch")) d.max_batch = s.integer("max_batch", 1, 1 << 16);
  if (s.has("prompt_tokens")) d.prompt_tokens = s.range("prompt_tokens", 1, kMaxTokens);
  if (s.has("decode_tokens")) d.decode_tokens = s.range("decode_tokens", 0, kMaxTokens);
  if (s.has("query_heads_per_kv_head")) {
    d.query_heads_per_kv_head = s.integer("query_heads_per_kv_head", 1, 1024);
  }
  if (s.has("seed")) {
    d.seed = static_cast<uint64_t>(s.integer("seed", 0, std::numeric_limits<int64_t>::max()));
  }
  if (s.has("gpu_attention_check_every")) {
    d.gpu_attention_check_every =
        s.integer("gpu_attention_check_every", 1, kMaxGpuAttentionCheckEvery);
  }
  if (const std::string problem = demo_fit_problem(d, s.config().cache); !problem.empty()) {
    s.fail("prompt_tokens", problem);
  }
  return d;
}

std::string demo_fit_problem(const DemoSpec& demo, const CacheSpec& cache) {
  const int64_t longest = demo.prompt_tokens[1] + demo.decode_tokens[1];
  const int64_t blocks = (longest + cache.block_size - 1) / cache.block_size;
  if (blocks <= cache.num_blocks) return {};
  return fmt::format(
      "the longest sequence the demo allows (prompt_tokens max {} + decode_tokens max {} = {} "
      "tokens) needs {} blocks of {} tokens; cache.num_blocks is {}",
      demo.prompt_tokens[1], demo.decode_tokens[1], longest, blocks, cache.block_size,
      cache.num_blocks);
}

}  // namespace kvq::demo
