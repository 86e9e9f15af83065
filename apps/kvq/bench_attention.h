#pragma once
// `kvq bench --attention`: decode attention timed over num_seqs x context for every cache format
// side by side (num_kv_heads 8, head_size 128, block_size 16, GQA 4 and 8 by default), against
// the same run's copy bandwidth. Bytes counted: what the attention must read and write at least
// -- every referenced token's K and V rows in the cache (data and scales), the block tables and
// seq_lens, the query, and the output (bf16).
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvq/core/registry.h"

namespace kvq::app::bench {

struct AttentionSweep {
  std::vector<int64_t> num_seqs{1, 8, 32, 128};
  std::vector<int64_t> contexts{512, 4096, 32768, 131072};
  std::vector<int64_t> groups{4, 8};
  std::vector<std::string> formats{"nvfp4", "fp8_e4m3", "fp8_e5m2", "bf16"};
  int64_t num_kv_heads = 8, head_size = 128, block_size = 16;
  uint64_t max_cache_bytes = uint64_t{48} << 30;  // larger caches are skipped, saying so
  int32_t iterations = 20;
  int32_t warmup = 3;
  int32_t graph_launches = 16;  // attends per captured graph (one a layer in an engine's step)
};

struct AttentionCaseResult {
  std::string format;
  int64_t group = 0, num_seqs = 0, context = 0;
  uint64_t cache_bytes = 0;            // the whole cache allocated
  uint64_t bytes = 0;                  // what one attend must move
  double direct_us = 0, graph_us = 0;  // medians per attend; graph 0 when not timed
  double copy_bps = 0;                 // a copy of the same bytes, the same run
  std::string skipped, error;
};

// Runs the sweep with `backend` (which must have attention) on `base`'s device and layout order;
// prints one line per case to `progress`. Throws only for what makes every case impossible.
std::vector<AttentionCaseResult> run_attention_sweep(const Backend& backend,
                                                     const BackendOptions& base,
                                                     const AttentionSweep& sweep,
                                                     std::ostream& progress);

// The table, formats side by side: time (graph replay where timed), GB/s, % of copy.
void print_attention_table(std::ostream& out, const std::vector<AttentionCaseResult>& results,
                           double copy_bps);

nlohmann::json attention_json(const std::vector<AttentionCaseResult>& results,
                              const AttentionSweep& sweep, const std::string& device,
                              double copy_bps);

}  // namespace kvq::app::bench
