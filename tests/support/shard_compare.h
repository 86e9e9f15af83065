#pragma once
// Tests of tensor-parallel shards (tests/cuda, tests/demo): a shard's cache, written for
// KV heads [head_begin, head_begin + n), against the cache one writer made for every head.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvq/core/page_layout.h"

namespace kvq::test {

// Compares every (page, side, token, head, group) of the shard with the full cache at the offsets
// each layout gives: "" when every byte is equal, else the first difference. It also checks that
// this covered every byte of the shard's cache (a layout with padding would not pass).
inline std::string compare_shard(const PageLayout& full, const std::vector<uint8_t>& full_bytes,
                                 const PageLayout& shard, const std::vector<uint8_t>& shard_bytes,
                                 int64_t head_begin) {
  const PageGeometry& g = shard.geometry();
  const auto data_bytes = static_cast<uint64_t>(shard.data_bytes_per_group());
  uint64_t compared = 0;
  for (int64_t b = 0; b < g.num_blocks; ++b) {
    const uint64_t fp = static_cast<uint64_t>(b) * full.page_bytes();
    const uint64_t sp = static_cast<uint64_t>(b) * shard.page_bytes();
    for (Side side : {Side::k, Side::v}) {
      for (int64_t t = 0; t < g.block_size; ++t) {
        for (int64_t h = 0; h < g.num_kv_heads; ++h) {
          for (int64_t s = 0; s < shard.groups(); ++s) {
            auto where = [&] {
              return "block " + std::to_string(b) + " side " + (side == Side::k ? "K" : "V") +
                     " token " + std::to_string(t) + " head " + std::to_string(head_begin + h) +
                     " group " + std::to_string(s);
            };
            const uint64_t fd = fp + full.data_offset(side, t, head_begin + h, s);
            const uint64_t sd = sp + shard.data_offset(side, t, h, s);
            if (std::memcmp(&full_bytes[fd], &shard_bytes[sd], data_bytes) != 0) {
              return "data bytes differ at " + where();
            }
            const uint8_t want = full_bytes[fp + full.scale_offset(side, t, head_begin + h, s)];
            const uint8_t got = shard_bytes[sp + shard.scale_offset(side, t, h, s)];
            if (got != want) {
              return "scale differs at " + where() + ": " + std::to_string(got) + " vs " +
                     std::to_string(want);
            }
            compared += data_bytes + 1;
          }
        }
      }
    }
  }
  if (compared != shard_bytes.size()) {
    return "compared " + std::to_string(compared) + " of " + std::to_string(shard_bytes.size()) +
           " bytes";
  }
  return "";
}

}  // namespace kvq::test
