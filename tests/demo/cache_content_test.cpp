// cache_content (unit): a head's content in the canonical order, independent of the layout, and
// the heads' contents together are every cache byte exactly once on every shipped arrangement.
#include "cache_content.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "kvq/core/cache_spec.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq::demo {
namespace {

CacheSpec spec(const char* order, const char* k_scales, const char* v_scales, int64_t heads) {
  CacheSpec s;
  s.num_blocks = 3;
  s.block_size = 8;
  s.num_kv_heads = heads;
  s.head_size = 64;
  s.layout = {order, k_scales, v_scales};
  return s;
}

TEST(CacheContent, Fnv1a64KnownVectors) {
  // The published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a64(nullptr, 0), 0xcbf29ce484222325ull);
  const uint8_t a[] = {'a'};
  EXPECT_EQ(fnv1a64(a, 1), 0xaf63dc4c8601ec8cull);
  const char* foobar = "foobar";
  EXPECT_EQ(fnv1a64(reinterpret_cast<const uint8_t*>(foobar), 6), 0x85944171f73967e8ull);
  // Continuing a hash is hashing the concatenation.
  EXPECT_EQ(fnv1a64(reinterpret_cast<const uint8_t*>(foobar) + 3, 3,
                    fnv1a64(reinterpret_cast<const uint8_t*>(foobar), 3)),
            0x85944171f73967e8ull);
  EXPECT_EQ(hex64(0xaf63dc4c8601ec8cull), "0xaf63dc4c8601ec8c");
  EXPECT_EQ(hex64(1), "0x0000000000000001");
}

TEST(CacheContent, FollowsTheLayoutsOffsetsInCanonicalOrder) {
  // HND, linear: head h's K data for (t, g) is at h*T*D/2 + t*D/2 + 8g; its scale at
  // side data bytes + h*T*S + t*S + g (format doc). Page bytes are numbered so each is visible.
  const auto layout = make_layout(spec("HND", "linear", "linear", 2));
  const uint64_t page = layout->page_bytes();
  ASSERT_EQ(page, 2u * 2 * 8 * (32 + 4));
  std::vector<uint8_t> cache(layout->cache_bytes());
  for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<uint8_t>(i * 7 + i / 251);
  std::vector<uint8_t> got;
  append_head_content(*layout, cache.data(), 1, got);
  std::vector<uint8_t> want;
  const uint64_t side_bytes = page / 2, data_region = 2 * 8 * 32;
  for (uint64_t b = 0; b < 3; ++b) {
    for (uint64_t side = 0; side < 2; ++side) {
      for (uint64_t t = 0; t < 8; ++t) {
        for (uint64_t g = 0; g < 4; ++g) {
          const uint64_t base = b * page + side * side_bytes;
          const uint64_t data = base + 1 * 8 * 32 + t * 32 + 8 * g;
          want.insert(want.end(), cache.begin() + static_cast<std::ptrdiff_t>(data),
                      cache.begin() + static_cast<std::ptrdiff_t>(data + 8));
          want.push_back(cache[base + data_region + 1 * 8 * 4 + t * 4 + g]);
        }
      }
    }
  }
  EXPECT_EQ(got, want);
}

TEST(CacheContent, HeadsTogetherAreEveryByteOnce) {
  for (const char* order : {"HND", "NHD"}) {
    for (const char* k : {"linear", "sm100_swizzled"}) {
      for (const char* v : {"linear", "sm100_swizzled"}) {
        SCOPED_TRACE(std::string(order) + " " + k + " " + v);
        const auto layout = make_layout(spec(order, k, v, 4));
        // Four walks over caches whose bytes hold byte k4 of their own index: together they name
        // the cache byte each content byte came from.
        const std::size_t n = layout->cache_bytes();
        std::vector<uint32_t> taken(n, 0);
        std::vector<std::vector<uint8_t>> walks(4);
        for (int k4 = 0; k4 < 4; ++k4) {
          std::vector<uint8_t> cache(n);
          for (std::size_t i = 0; i < n; ++i) cache[i] = static_cast<uint8_t>(i >> (8 * k4));
          for (int64_t h = 0; h < 4; ++h) append_head_content(*layout, cache.data(), h, walks[k4]);
        }
        ASSERT_EQ(walks[0].size(), n);
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t index = static_cast<std::size_t>(walks[0][j]) |
                                    (static_cast<std::size_t>(walks[1][j]) << 8) |
                                    (static_cast<std::size_t>(walks[2][j]) << 16) |
                                    (static_cast<std::size_t>(walks[3][j]) << 24);
          ASSERT_LT(index, n);
          ++taken[index];
        }
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(taken[i], 1u) << "byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvq::demo
