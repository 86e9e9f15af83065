#pragma once
// Decode attention on the GPU, as an engine runs a decode step: the step's write, then the
// backend's attention (kvq/core/attention.h, docs/attention.md) for every sequence the step
// wrote, over its pages in the cache: one attend per KV-head shard of a ShardedCache, each on its
// shard's device and stream, over its shard's heads. kvq-demo runs it on a backend whose
// attention is on a CUDA device (apps/kvq-demo/README.md).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvq/core/attention.h"
#include "kvq/core/device_buffer.h"
#include "kvq/core/registry.h"
#include "sequence_scheduler.h"
#include "sharded_cache.h"

namespace kvq::demo {

// One decode step's attention inputs besides the query, as the backend's attention takes them.
struct StepTables {
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;             // the longest block list of the step: the table's columns
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks]: each sequence's pages, then -1
  std::vector<int32_t> seq_lens;      // [num_seqs]: each sequence's tokens in the cache
};

// The tables of `sequences`, in the order given: row i holds sequences[i]'s block table and
// length. Throws kvq::Error (internal) for a sequence whose block table is shorter than
// ceil(length / block_size), a length below 1, or a block id or length outside int32.
StepTables build_step_tables(const std::vector<const Sequence*>& sequences, int64_t block_size);

// The bytes one attend must move over a cache of `layout` for `num_q_heads` query heads of
// `tables`' sequences: every referenced token's K and V rows in the page, data and scale bytes
// (2 x num_kv_heads x (row_bytes + groups) a token, from the layout's descriptor), the
// block-table entries those tokens name (4 bytes each), the seq_lens (4 each), the bf16 query and
// the f32 output ([num_seqs, num_q_heads, head_size] each).
uint64_t attention_bytes(const PageLayout& layout, int64_t num_q_heads, const StepTables& tables);

// Whether the output of decode step `step` (0-based) is compared with f32 attention: the first
// step and every `every`th after it (demo.gpu_attention_check_every, >= 1).
inline bool is_checked_step(int64_t step, int64_t every) {
  return step % every == 0;
}

// The median of `values`: the middle one, or the mean of the two middle ones; 0 when empty.
double median(std::vector<double> values);

class GpuAttention {
 public:
  // One attention per shard of `cache`, made by `backend` from `options` (the whole cache's) with
  // the shard's heads on the shard's device, and buffers on that device, allocated once for up to
  // `max_seqs` sequences of up to `max_blocks` pages with `group` query heads per KV head: query
  // (bf16), output (f32), block tables, seq_lens and the workspace the largest call asks for
  // (which serves every smaller call, docs/attention.md).
  // Throws kvq::Error: the backend's refusal of the cache or shape (invalid_argument, e.g. cuda
  // for a head_size its kernels are not built for, or more than 65535 sequences), a failed
  // allocation, or internal when an attention is not on its shard's device.
  GpuAttention(const Backend& backend, const BackendOptions& options, ShardedCache& cache,
               int64_t group, int64_t max_seqs, int64_t max_blocks);

  // One step over tables.num_seqs sequences: query [S, H * group, D] bf16 bits on the host. Stages
  // each shard's slice of the query (its heads' query heads), the tables and seq_lens on the
  // shard's device and synchronizes, then issues
  // every shard's attend before synchronizing any (shards on different devices run at once) and
  // synchronizes them in order. Returns the seconds from the first issue to the last synchronize.
  // Throws kvq::Error: runtime for a failure of the device (a CUDA error), internal for a call the
  // attention refuses (the demo built it wrong).
  double attend(const uint16_t* query, const StepTables& tables);

  // The last attend's output, [S, H * group, D] f32 on the host, gathered from the shards.
  void output(float* out);

  // attention_bytes() summed over the shards: each reads its own heads' rows, its query heads'
  // query and output, and all of the tables.
  uint64_t bytes(const StepTables& tables) const;

  // The block ids and seq_lens the attends skipped on the devices since the last take, summed
  // over the shards (the demo's tables are in range: must be zeros). Synchronizes every device.
  AttentionOutOfRange take_out_of_range();

  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }

 private:
  struct Shard {
    int64_t head_begin = 0;  // KV heads [head_begin, head_begin + num_heads)
    int64_t num_heads = 0;
    std::shared_ptr<DeviceRuntime> runtime;
    std::shared_ptr<KVCacheAttention> attention;
    void* cache = nullptr;         // the shard's cache, owned by the ShardedCache
    uint64_t workspace_bytes = 0;  // of `workspace`: what the largest call asks for
    DeviceBuffer query;            // [max_seqs, num_heads * group, D] bf16
    DeviceBuffer output;           // [max_seqs, num_heads * group, D] f32
    DeviceBuffer block_tables;     // [max_seqs * max_blocks] i32
    DeviceBuffer seq_lens;         // [max_seqs] i32
    DeviceBuffer workspace;        // workspace_bytes (none while 0)
  };

  int64_t group_ = 1, head_size_ = 0, num_q_heads_ = 0;  // num_q_heads_: over every shard
  int64_t max_seqs_ = 0, max_blocks_ = 0;
  float k_scale_ = 1.0f, v_scale_ = 1.0f;
  int64_t last_num_seqs_ = 0;
  std::vector<Shard> shards_;
  std::vector<uint16_t> scratch_query_;
  std::vector<float> scratch_output_;
};

}  // namespace kvq::demo
