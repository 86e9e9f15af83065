#pragma once
// The write and read contract, checked once, on the host, before a call crosses into any backend:
// every backend gets the same refusals in the same words. A backend adds only what it declared in
// its kvq_requirements (device, input dtypes, alignment, contiguity), which is checked here too.
//
//   write: key, value [T, H, D] of one dtype the backend takes, non-negative strides;
//          slot_mapping [T] i64 | i32 (host slots: each < num_blocks * block_size, none twice);
//          cache [num_blocks, page_bytes] u8 contiguous; no input sharing memory with the cache;
//          k/v scales usable (kvq/core/scale_rule.h): host values here, device values by the
//          backend where it reads them.
//   attend: query [S, Hq, D] bf16 | f16 (Hq a multiple of num_kv_heads); block_tables [S, M] i32;
//          seq_lens [S] i32 (host values: 0 <= seq_len <= M * block_size, and every block id a
//          token < seq_len names < num_blocks); cache as for a write; output [S, Hq, D] bf16 | f16
//          | f32, every element its own memory, apart from everything else; scales as for a
//          write; softmax_scale > 0 and finite; a workspace of the bytes the backend asked for.
//   read:  cache as for a write; slot_mapping [T] (host slots < num_blocks * block_size, repeats
//          allowed); key, value out [T, H, D] f32, every element its own memory, apart from each
//          other, the cache and the slots; scales usable.
// Messages name the tensor, the index and the value and say what was expected:
//   "slot_mapping[17] = 4096: expected < 4096 (num_blocks 256 x block_size 16; ...)".
#include <cstdint>
#include <string_view>

#include "kvq/abi/plugin.h"
#include "kvq/core/attention.h"
#include "kvq/core/export.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/status.h"

namespace kvq {

// `backend` names the backend in the refusals of what it declared ("cuda needs ...").
KVQ_API Status check_write_args(const WriteArgs& args, const PageLayout& layout,
                                const kvq_requirements& needs, std::string_view backend) noexcept;
KVQ_API Status check_read_args(const ReadArgs& args, const PageLayout& layout,
                               const kvq_requirements& needs, std::string_view backend) noexcept;
// `workspace_bytes`: what the backend's workspace_bytes() asked for this shape; args.softmax_scale
// as it will cross (0 already replaced by default_softmax_scale).
KVQ_API Status check_attention_args(const AttentionArgs& args, const PageLayout& layout,
                                    const kvq_requirements& needs, std::string_view backend,
                                    uint64_t workspace_bytes) noexcept;
// 1 / sqrt(head_size), the scale AttentionArgs::softmax_scale = 0 stands for.
KVQ_API float default_softmax_scale(int64_t head_size) noexcept;

}  // namespace kvq
