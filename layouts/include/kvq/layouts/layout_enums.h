#pragma once
// The words of a page layout as the plain integers kernels switch on. The names users write in
// YAML live next to each value's definition (scale_arrangements/*.h, nvfp4_page_layout.cpp).
#include <cstdint>

namespace kvq {

// Order of the (head, token) rows inside a region.
//   HND: head-major  [num_heads, block_size, ...] -- each head's tokens contiguous (trtllm-gen)
//   NHD: token-major [block_size, num_heads, ...] -- each token's heads contiguous
enum class Order : int32_t { HND = 0, NHD = 1 };

// How a side's scale bytes sit inside each head's [block_size, groups] tile
// (one file per value in scale_arrangements/, listed in scale_arrangements.h).
enum class ScaleArrangement : int32_t { linear = 0, sm100_swizzled = 1 };

}  // namespace kvq
