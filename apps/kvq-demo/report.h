#pragma once
// What kvq-demo measured, printed for people (stdout) and for programs (--json FILE).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvq::demo {

struct VerifyResult {
  std::string reference;        // "reference_cpu"
  uint64_t bytes_compared = 0;  // the whole cache
  int64_t differing_bytes = 0;
  int64_t first_difference = -1;  // byte offset of the first difference, -1 when equal
};

// One KV-head shard (--tensor-parallel N gives N; otherwise one with every head).
struct ShardResult {
  std::string device;       // "cpu", "cuda:1"
  std::string device_name;  // its runtime's device_name()
  int64_t head_begin = 0, num_heads = 0;
  uint64_t page_bytes = 0;   // of the shard's own pages (its heads only)
  int64_t pages_used = 0;    // the most in use at once: every shard follows the same block tables
  uint64_t bytes_used = 0;   // pages_used * page_bytes
  uint64_t cache_bytes = 0;  // allocated: num_blocks * page_bytes
  std::vector<uint64_t> head_hashes;  // FNV-1a 64 of each head's content (cache_content.h)
};

// One shard's part of one write, in microseconds since the run started (ShardWriteTimes).
struct TimelineShard {
  double start_us = 0, issued_us = 0, end_us = 0;
};

struct TimelineWrite {
  int64_t index = 0;   // 0-based, in the order written
  int64_t tokens = 0;  // rows written, padding included
  bool prefill = false;
  std::vector<TimelineShard> shards;
};

// --timeline: when each shard's writes ran, to show that shards on different devices overlap.
struct TimelineResult {
  int64_t writes = 0;
  // Summed over writes (two shards or more): first end - last issued, where positive: the time
  // every shard's write had been issued and none had been seen to finish. On a GPU backend,
  // whose write() only queues the kernel, that is time both devices had the write queued or
  // running; a CPU writer does its work inside write(), so its shards do not overlap and this is
  // about zero.
  double overlap_s = 0;
  double write_s = 0;  // summed over writes: last end - first start (as write_seconds)
  std::vector<double> shard_busy_s;    // per shard, summed end - start
  std::vector<double> shard_issue_s;   // per shard, summed issued - start
  std::vector<TimelineWrite> largest;  // the largest writes, in the order written
};

// Decode attention on the GPU (gpu_attention.h): after each decode step's write, the backend's
// attention over the sequences the step wrote. Runs on a backend with attention whose shards are
// all on CUDA devices; otherwise `reason` says why not (attention is then measured on the host
// only: DemoResult::attention_*).
struct GpuAttentionResult {
  bool ran = false;
  std::string reason;                // when it did not run, why not
  int64_t steps = 0;                 // decode steps attended
  int64_t calls = 0;                 // attend() calls: steps x shards
  double us_per_step_median = 0;     // per step: first issue to last synchronize
  double seconds = 0;                // summed over the steps
  uint64_t bytes = 0;                // summed over the steps (gpu_attention.h, attention_bytes)
  double gb_per_s = 0;               // bytes / seconds, 1e9 bytes
  int64_t check_every = 0;           // demo.gpu_attention_check_every
  int64_t checked_steps = 0;         // steps whose output was compared
  int64_t checked_queries = 0;       // query heads x sequences over those steps
  double rel_error = 0, cosine = 0;  // GPU output vs f32 attention on the original rows
};

struct DemoResult {
  // Where it ran.
  std::string backend;
  std::string backend_version;
  std::string device;  // the runtime's device_name()
  // The cache.
  std::string format, order, k_scales, v_scales;
  int64_t num_kv_heads = 0, head_size = 0, block_size = 0;
  uint64_t page_bytes = 0;
  float k_scale = 1, v_scale = 1;
  // The workload.
  uint64_t seed = 0;
  int64_t sequences = 0, max_batch = 0, query_heads_per_kv_head = 0;
  int64_t prompt_min = 0, prompt_max = 0, decode_min = 0, decode_max = 0;
  int64_t sequences_finished = 0;     // checked and freed on the way
  int64_t sequences_live_at_end = 0;  // checked at the end
  int64_t tokens_written = 0;         // real tokens (padding rows not counted)
  int64_t prefill_writes = 0, decode_writes = 0, padding_slots = 0;
  // Pages.
  int64_t pages_total = 0;
  int64_t pages_used = 0;      // the most in use at once
  int64_t pages_distinct = 0;  // ever used
  int64_t pages_reused = 0;    // allocations that got a page another sequence had freed
  int64_t pages_in_use_at_end = 0;
  int64_t blocks_leaked = 0;  // must be 0 (SequenceScheduler::blocks_leaked)
  // Memory per token, exact from the layout.
  double bytes_per_token = 0;       // page_bytes / block_size
  double bytes_per_token_bf16 = 0;  // K and V: 2 * H * D * 2 bytes
  double compression_vs_bf16 = 0;
  // Accuracy over every token written (each sequence read back once, at finish or at the end).
  double k_rel_error = 0, v_rel_error = 0;
  double attention_rel_error = 0, attention_cosine = 0;
  int64_t attention_queries = 0;  // query heads x sequences
  GpuAttentionResult gpu_attention;
  // Speed.
  double write_seconds = 0;  // writes only, each synchronized
  double write_tokens_per_s = 0;
  double write_gb_per_s = 0;  // bf16 K/V input bytes consumed / write_seconds, 1e9 bytes
  double wall_s = 0;
  std::optional<VerifyResult> verify;
  // Tensor parallelism: the shards, in head order, and the cache's content hash (FNV-1a 64 over
  // every head's content in head order: the same for any number of shards).
  std::vector<ShardResult> shards;
  uint64_t cache_hash = 0;
  std::optional<TimelineResult> timeline;
};

// The report for people.
void print_report(std::ostream& out, const DemoResult& r);

// The keys of issue 8 (backend, device, tokens_written, pages_used, pages_total,
// bytes_per_token, bytes_per_token_bf16, compression_vs_bf16, k_rel_error, v_rel_error,
// attention_rel_error, attention_cosine, write_tokens_per_s, write_gb_per_s, wall_s), plus
// gpu_attention (true or false) with gpu_attention_reason when false and the GPU attention's
// numbers (gpu_attention_calls, ..._us_per_step, ..._gb_per_s, ..._rel_error, ..._cosine, ...)
// when true, blocks_leaked, verify_differing_bytes with --verify, cache_fnv1a64, shards (per shard:
// device, device_name, kv_heads [begin, end), pages_used, page_bytes, bytes_used, cache_bytes,
// head_fnv1a64), and timeline with --timeline.
nlohmann::ordered_json to_json(const DemoResult& r);

// --formats: one line per format (bytes per token, capacity in tokens of `budget_bytes`, K/V
// error, attention error and cosine, write throughput), and the same as JSON
// ({"budget_bytes", "formats": [to_json(r) + "capacity_tokens", ...]}).
void print_format_table(std::ostream& out, const std::vector<DemoResult>& results,
                        uint64_t budget_bytes);
nlohmann::ordered_json formats_json(const std::vector<DemoResult>& results, uint64_t budget_bytes);

// The --timeline section for people: a summary and the largest writes' timestamps per shard.
void print_timeline(std::ostream& out, const DemoResult& r);

}  // namespace kvq::demo
