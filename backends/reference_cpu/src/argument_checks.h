#pragma once
// Validation of a whole write or read before any byte moves. Every failure throws kvq::Error whose
// message names the tensor, the index and the value at fault and says what was expected:
//   "slot_mapping[17] = 4096: expected < 4096 (num_blocks 256 x block_size 16)".
#include <cstdint>

#include "kvq/core/kv_cache.h"
#include "kvq/core/slot_mapping.h"  // slot_at, for the writer and reader loops
#include "kvq/layouts/nvfp4_descriptor.h"

namespace kvq::reference_cpu {

struct CheckedWrite {
  int64_t num_tokens = 0;
  float k_scale = 1.0f;  // resolved from the value or the pointer
  float v_scale = 1.0f;
};

// key/value [T, H, D] bf16|f16|f32 (same dtype, any non-negative strides, host memory),
// slot_mapping [T] i64|i32, every slot < num_blocks * block_size and none twice,
// cache [num_blocks, page_bytes] u8 contiguous, scales > 0 and finite, no input inside the cache.
CheckedWrite check_write(const WriteArgs& args, const Nvfp4LayoutDesc& desc);

// cache as for a write; slot_mapping [T] i64|i32, slots < num_blocks * block_size (duplicates are
// fine); key/value out [T, H, D] f32 with non-negative strides, not overlapping the cache or each
// other; scales > 0 and finite.
int64_t check_read(const ReadArgs& args, const Nvfp4LayoutDesc& desc);

}  // namespace kvq::reference_cpu
