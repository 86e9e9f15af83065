#include "cache_content.h"

#include <fmt/format.h>

namespace kvq::demo {

void append_head_content(const PageLayout& layout, const uint8_t* cache, int64_t head,
                         std::vector<uint8_t>& out) {
  const PageGeometry& g = layout.geometry();
  const int64_t groups = layout.groups();
  const auto data_bytes = static_cast<std::size_t>(layout.data_bytes_per_group());
  const uint64_t page_bytes = layout.page_bytes();
  out.reserve(out.size() + static_cast<std::size_t>(g.num_blocks * 2 * g.block_size * groups) *
                               (data_bytes + 1));
  for (int64_t b = 0; b < g.num_blocks; ++b) {
    const uint8_t* page = cache + static_cast<uint64_t>(b) * page_bytes;
    for (Side side : {Side::k, Side::v}) {
      for (int64_t t = 0; t < g.block_size; ++t) {
        for (int64_t s = 0; s < groups; ++s) {
          const uint8_t* data = page + layout.data_offset(side, t, head, s);
          out.insert(out.end(), data, data + data_bytes);
          if (layout.has_scales()) out.push_back(page[layout.scale_offset(side, t, head, s)]);
        }
      }
    }
  }
}

uint64_t fnv1a64(const uint8_t* bytes, std::size_t size, uint64_t hash) {
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string hex64(uint64_t v) {
  return fmt::format("{:#018x}", v);
}

}  // namespace kvq::demo
