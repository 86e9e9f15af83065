#pragma once
// One page of a PageLayout drawn as an SVG a person can read (`kvq layout --svg`):
//   1. each side as a bar to scale, split into its data and scale regions, with every head (HND)
//      or token (NHD) marked;
//   2. a zoom on one head's scale tiles, K and V side by side: the bytes in address order, each
//      labelled with the (token, group) stored there, coloured by token, for the first 8 tokens,
//      with 32-bit words outlined -- so the sm100_swizzled 4-token interleave is visible.
// With a target (`kvq layout --locate`), its data bytes and scale byte are outlined in red in
// both sections, the zoom shows the target's head and the 8 tokens around it, and a line names
// the offsets.
// Uses only the PageLayout interface (regions(), data_offset(), scale_offset(), metadata()).
#include <cstdint>
#include <optional>
#include <string>

#include "kvq/core/export.h"
#include "kvq/core/page_layout.h"

namespace kvq {

struct PageSvgTarget {
  Side side = Side::k;
  int64_t token = 0, head = 0, group = 0;
};

KVQ_API std::string page_svg(const PageLayout& layout, int64_t zoom_head = 0);
// The page with `target` marked; its head is the zoom's. Throws kvq::Error (out_of_range) for a
// target outside the geometry.
KVQ_API std::string page_svg(const PageLayout& layout, const PageSvgTarget& target);

}  // namespace kvq
