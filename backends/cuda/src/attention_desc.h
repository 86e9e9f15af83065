#pragma once
// What the decode-attention kernels take: ONE plain struct, built and validated on the host
// (attention_plan.cpp), trusted by the device. No CUDA header: host-only code builds and
// unit-tests it.
//
// Grid of the main kernel: (num_splits, num_kv_heads * head_tiles, num_seqs); each CTA attends
// the query heads [tile * 16, tile * 16 + 16) of one kv head's group over the tokens
// [split * split_tokens, min(seq_len, (split + 1) * split_tokens)) of one sequence.
#include <cstdint>

#include "fast_divmod.h"
#include "kvq/abi/page.h"

namespace kvq::cuda {

// Head sizes the kernels are built for (the fragments of a row are unrolled at compile time).
inline constexpr int kAttentionHeadSizes[] = {64, 128, 256};
inline constexpr int kAttentionWarps = 4;          // per CTA
inline constexpr int kAttentionTileTokens = 16;    // per warp step (one mma M/N/K of 16)
inline constexpr int kAttentionHeadsPerTile = 16;  // query heads per CTA (the mma's M)
inline constexpr int kAttentionMaxSplits = 1024;   // the reduce kernel holds this many lse values

// How a side's scale bytes reach shared memory (nvfp4 only).
enum AttentionScaleCopy : int32_t {
  kScalesNone = 0,         // formats without scales
  kScalesLinearWords = 1,  // linear: each token's S bytes as S / 4 async 4-byte copies
  kScalesQuadWords = 2,    // sm100_swizzled: each (4-token quad, group) 32-bit word, one copy
  kScalesBytes = 3,        // anything else (a 4-misaligned cache): byte loads, stored linear
};

enum AttentionOutputType : int32_t { kOutBf16 = 0, kOutF16 = 1, kOutF32 = 2 };

// Device-side values skipped, counted since the attention was made (take_out_of_range reports
// the growth).
struct AttentionCounters {
  unsigned long long block_ids;  // table entries outside [0, num_blocks) (once per entry)
  unsigned long long seq_lens;   // sequences with seq_len < 0 or past the table (once each)
  unsigned long long scales;     // (sequence, kv head)s with an unusable device scale
};

struct AttentionKernelDesc {
  // The cache: [num_blocks, page_bytes] and its page maps (kvq/abi/page.h).
  const uint8_t* cache;
  uint64_t page_bytes;
  int32_t num_blocks;
  FastDivmod block_div;   // block_size (its divisor): every position < max_blocks x it < 2^31
  kvq_side_map side[2];   // 0 = K, 1 = V
  int32_t data_access;    // bytes of each data-row copy: 16, 8, 4 (async) or 2, 1 (loads)
  int32_t scale_copy[2];  // AttentionScaleCopy of K and V

  int32_t num_kv_heads;
  int32_t group;       // query heads per kv head
  int32_t head_tiles;  // ceil(group / 16)
  int32_t num_q_heads;

  const uint16_t* query;  // [num_seqs, num_q_heads, head_size] bf16 | f16 bits, strides below
  int64_t query_stride[3];
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int64_t table_stride[2];
  int32_t max_blocks;
  const int32_t* seq_lens;
  int64_t seq_len_stride;
  void* output;  // [num_seqs, num_q_heads, head_size]
  int64_t output_stride[3];
  int32_t output_type;  // AttentionOutputType

  // Scales: per head where given, else the pointer where given, else the value.
  float k_scale, v_scale;
  const float* k_scale_ptr;
  const float* v_scale_ptr;
  const float* k_head_scales;  // [num_kv_heads]
  const float* v_head_scales;
  float softmax_scale_log2;  // softmax_scale * log2(e): scores live in the exp2 domain

  int32_t num_splits;    // 1: the main kernel writes the output; else partials + reduce
  int32_t split_tokens;  // tokens per split, a multiple of 16 * warps
  float* partial_out;    // [num_seqs, num_q_heads, num_splits, head_size] f32
  float* partial_lse;    // [num_seqs, num_q_heads, num_splits] f32, log2 domain (-inf: empty)

  AttentionCounters* counters;
};

}  // namespace kvq::cuda
