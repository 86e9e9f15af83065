#pragma once
// The NVFP4 page layout as plain data: what kernels (and the CPU writer) take instead of a list of
// strides. Built and validated on the host by Nvfp4PageLayout; device code trusts it.
//
// One page (offsets from the page start; T = block_size, H = num_heads, D = head_size, S = D/16):
//   [ K data | K scales | V data | V scales ]       side s = [ data at side[s].data_base,
//     H*T*D/2   H*T*S     H*T*D/2  H*T*S                       scales at side[s].scale_base ]
//   data row (h, t):  HND (h*T + t) * D/2     NHD (t*H + h) * D/2;   group g at + 8*g
//   scale (h, t, g):  (t', s') = arrangement(t, g), then
//                     HND (h*T + t')*S + s'   NHD (t'*H + h)*S + s'
#include <cstdint>

#include "kvq/layouts/hd.h"
#include "kvq/layouts/layout_enums.h"
#include "kvq/layouts/scale_arrangements.h"

namespace kvq {

struct Nvfp4SideDesc {
  uint64_t data_base;   // [H*T, D/2] E2M1 pairs, rows in `order`
  uint64_t scale_base;  // [H*T, S] E4M3, rows in `order`, (t, s) placed by `scales`
  ScaleArrangement scales;
};

struct Nvfp4LayoutDesc {
  int64_t num_blocks, block_size, num_heads, head_size, groups;  // groups = head_size / 16
  uint64_t page_bytes;
  Order order;
  Nvfp4SideDesc side[2];  // 0 = K, 1 = V

  // Offset within a page of the first of the 8 data bytes of group g of (t, h); side 0 = K, 1 = V.
  KVQ_HD uint64_t data_offset(int s, int64_t t, int64_t h, int64_t g) const {
    const int64_t row = order == Order::HND ? h * block_size + t : t * num_heads + h;
    return side[s].data_base + static_cast<uint64_t>(row * (head_size / 2) + 8 * g);
  }

  // Offset within a page of the scale byte of group g of (t, h).
  KVQ_HD uint64_t scale_offset(int s, int64_t t, int64_t h, int64_t g) const {
    int64_t tp, sp;
    ScaleArrangements::place(side[s].scales, t, g, groups, tp, sp);
    const int64_t row = order == Order::HND ? h * block_size + tp : tp * num_heads + h;
    return side[s].scale_base + static_cast<uint64_t>(row * groups + sp);
  }
};

}  // namespace kvq
