#pragma once
// The host's decode-attention interface, the third object a backend makes beside its writer and
// reader (kvq/core/kv_cache.h): one new query token per sequence attends over the sequence's
// cached K and V, read straight from the pages. A plugin's attention (kvq_attention,
// kvq/abi/plugin.h) reaches host code as KVCacheAttention, after core has checked the contract
// (check_attention_args, kvq/core/contract.h). docs/attention.md has the algorithm and a call.
#include <cstdint>

#include "kvq/core/page_layout.h"
#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

struct AttentionArgs {
  TensorView query;         // [num_seqs, num_q_heads, head_size] bf16 | f16; num_q_heads a
                            // multiple of num_kv_heads (q head q reads kv head q / group)
  TensorView block_tables;  // [num_seqs, max_blocks_per_seq] i32: the pages of each sequence
  TensorView seq_lens;      // [num_seqs] i32: tokens of each sequence; 0: padding (zeros out)
  TensorView cache;         // [num_blocks, page_bytes] u8, contiguous
  TensorView output;        // out: [num_seqs, num_q_heads, head_size] bf16 | f16 | f32
  float k_scale = 1.0f;     // dequantization scales as for a write (kvq/core/kv_cache.h) ...
  float v_scale = 1.0f;
  const float* k_scale_ptr = nullptr;  // ... or one f32 each on the backend's device
  const float* v_scale_ptr = nullptr;
  TensorView k_head_scales;  // fp8 pages: [num_kv_heads] f32 (data null: none)
  TensorView v_head_scales;
  float softmax_scale = 0.0f;  // > 0; 0: 1 / sqrt(head_size)
  TensorView workspace;        // [>= workspace_bytes(...)] u8 on the device; data null when 0
  void* stream = nullptr;      // cudaStream_t for CUDA backends; ignored by CPU backends
};

// What attend() skipped among device-side values since the last take (see take_out_of_range).
struct AttentionOutOfRange {
  int64_t block_ids = 0;  // table entries outside [0, num_blocks) that a token < seq_len named
  int64_t seq_lens = 0;   // sequences whose seq_len was < 0 or past max_blocks_per_seq x
                          // block_size (their output is zeros)
  int64_t scales = 0;     // (sequence, kv head) pairs whose device K or V scale broke the scale
                          // rule (kvq/core/scale_rule.h; their query heads' output is zeros)
};

// Rules as for writers and readers: attend() may be called from several threads at once; on a
// GPU it validates on the host, queues its work on args.stream and returns (everything must stay
// alive until the stream has run it); it allocates nothing, so it can be captured in a CUDA graph.
class KVQ_API KVCacheAttention {
 public:
  virtual ~KVCacheAttention() = default;

  // Validates everything, then computes `output`. Host-side block ids and seq_lens out of range
  // are refused (out_of_range) with nothing computed; device-side ones are skipped and counted.
  virtual Status attend(const AttentionArgs& args) noexcept = 0;

  // Bytes of `workspace` an attend() of this shape needs (0: none): the caller allocates it once
  // for its largest shape (a larger workspace serves every smaller one of the same num_q_heads).
  virtual Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks_per_seq,
                                 uint64_t* bytes) const noexcept = 0;

  // Synchronizes with the attends issued so far, returns what they skipped and resets the
  // counts. CPU backends refuse such values up front: always zeros.
  virtual Status take_out_of_range(AttentionOutOfRange* counts) noexcept = 0;

  virtual const PageLayout& layout() const noexcept = 0;
  virtual Device device() const noexcept = 0;
};

}  // namespace kvq
