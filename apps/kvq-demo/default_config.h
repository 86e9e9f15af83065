#pragma once
// The config `kvq-demo` runs with no --config: parsed and validated exactly like a file
// (kvq::app::parse_checked_config), so a mistake here fails like one in a user's file would.
// Sizes: the whole run takes a few seconds on 2 CPU cores with reference_cpu (measured in
// apps/kvq-demo/README.md) and stays well under 20 s.
#include <string_view>

namespace kvq::demo {

inline constexpr std::string_view kDefaultConfigSource = "<kvq-demo default config>";

inline constexpr std::string_view kDefaultConfig = R"(# kvq-demo's default (kvq-demo --print-config)
backend: auto                # the available backend with the highest score
cache:
  format: nvfp4
  num_blocks: 1024           # pages in the cache
  block_size: 16             # tokens per page
  num_kv_heads: 8
  head_size: 128
  layout:
    order: HND
    k_scales: linear
    v_scales: sm100_swizzled # the SM100 (Blackwell trtllm-gen) layout
  k_scale: 1.0
  v_scale: 1.0
log:
  level: warn
demo:
  sequences: 32              # sequences run in all
  max_batch: 8               # live at once (decode batch width)
  prompt_tokens: [128, 1024] # each prompt's length, drawn uniformly
  decode_tokens: [32, 256]   # tokens decoded after the prompt
  query_heads_per_kv_head: 4 # GQA group size
  seed: 1234
  gpu_attention_check_every: 16 # GPU backends: its attention vs f32 on 1 decode step in 16
)";

}  // namespace kvq::demo
