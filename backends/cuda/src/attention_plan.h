#pragma once
// Host planning of a decode attention: which shapes the kernels take, how a call is split over
// CTAs (flash-decoding), the workspace that needs, and the one descriptor the kernels trust.
// No CUDA header (unit-tested without a GPU).
#include <cstdint>

#include "attention_desc.h"
#include "kvq/abi/page.h"
#include "kvq/core/attention.h"
#include "kvq/core/status.h"

namespace kvq::cuda {

// invalid_argument (key "cache.head_size" / "cache.num_blocks") when the cuda kernels cannot
// attend over pages of this geometry: head_size other than 64, 128, 256; num_blocks or a
// page's bytes past what 32-bit ids and 64-bit offsets hold.
Status check_attention_geometry(const kvq_page_desc& page) noexcept;

struct SplitPlan {
  int32_t head_tiles = 1;        // ceil(group / 16)
  int32_t num_splits = 1;        // CTAs along one sequence's tokens
  int32_t split_tokens = 0;      // tokens per split (a multiple of 64)
  uint64_t workspace_bytes = 0;  // this plan's partial results (0 unsplit)
};

// The split of a call of this shape on a device of `target_ctas` resident CTAs: the number of
// splits (of a multiple of 64 tokens, at most kAttentionMaxSplits, their CTAs within 8 waves)
// that minimizes waves x tokens per CTA, so one long sequence fills the device and many
// sequences avoid a mostly empty last wave. invalid_argument for shapes past the launch limits
// (num_seqs > 65535, max_blocks_per_seq x block_size >= 2^31, ...).
Status plan_splits(const kvq_page_desc& page, int64_t num_seqs, int64_t num_q_heads,
                   int64_t max_blocks_per_seq, int32_t target_ctas, SplitPlan* out) noexcept;

// What workspace_bytes() answers: at least the workspace_bytes of the plan of every shape with
// at most num_seqs sequences and max_blocks_per_seq blocks (the same num_q_heads), so one
// workspace sized for the largest shape serves every call. Bounded by a constant of the device
// (8 waves of CTAs x 16 heads' partial rows), however large the shape.
Status workspace_bound(const kvq_page_desc& page, int64_t num_seqs, int64_t num_q_heads,
                       int64_t max_blocks_per_seq, int32_t target_ctas, uint64_t* bytes) noexcept;

// The descriptor of a call whose arguments the contract has passed; counters are the
// attention's. Fills everything but what the launch decides.
Status plan_attention(const AttentionArgs& args, const kvq_page_desc& page, const SplitPlan& plan,
                      AttentionCounters* counters, AttentionKernelDesc* out) noexcept;

}  // namespace kvq::cuda
