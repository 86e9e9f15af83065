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
//   read:  cache as for a write; slot_mapping [T] (host slots < num_blocks * block_size, repeats
//          allowed); key, value out [T, H, D] f32, every element its own memory, apart from each
//          other, the cache and the slots; scales usable.
// Messages name the tensor, the index and the value and say what was expected:
//   "slot_mapping[17] = 4096: expected < 4096 (num_blocks 256 x block_size 16; ...)".
#include <cstdint>
#include <string_view>

#include "kvq/abi/plugin.h"
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

}  // namespace kvq
