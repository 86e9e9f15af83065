#pragma once
// One page of a PageLayout drawn as an SVG a person can read (`kvq layout --svg`):
//   1. each side as a bar to scale, split into its data and scale regions, with every head (HND)
//      or token (NHD) marked;
//   2. a zoom on one head's scale tiles, K and V side by side: the bytes in address order, each
//      labelled with the (token, group) stored there, coloured by token, for the first 8 tokens,
//      with 32-bit words outlined -- so the sm100_swizzled 4-token interleave is visible.
// Uses only the PageLayout interface (regions(), scale_offset(), metadata()).
#include <cstdint>
#include <string>

#include "kvq/core/export.h"
#include "kvq/core/page_layout.h"

namespace kvq {

KVQ_API std::string page_svg(const PageLayout& layout, int64_t zoom_head = 0);

}  // namespace kvq
