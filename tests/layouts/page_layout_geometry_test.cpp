// The NVFP4 page layout over a sweep of geometries: every data and scale byte of every
// (side, token, head, group) lies inside the page, none overlap, together they cover the page,
// the descriptor agrees with the interface, the regions tile the page, and each scale arrangement
// equals its closed form.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kvq/core/status.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq {
namespace {

CacheSpec spec_of(int64_t H, int64_t D, int64_t T, const std::string& order, const std::string& k,
                  const std::string& v, int64_t num_blocks = 3) {
  CacheSpec s;
  s.format = "nvfp4";
  s.num_blocks = num_blocks;
  s.block_size = T;
  s.num_kv_heads = H;
  s.head_size = D;
  s.layout = {order, k, v};
  return s;
}

// Where the closed forms say a scale byte is, relative to its region.
int64_t expected_scale(const std::string& order, const std::string& arrangement, int64_t T,
                       int64_t H, int64_t S, int64_t t, int64_t h, int64_t s) {
  int64_t tp = t, sp = s;
  if (arrangement == "sm100_swizzled") {
    if (order == "HND") return h * T * S + (t / 4) * 4 * S + 4 * s + t % 4;  // the doc's form
    const int64_t g = S / 4;
    tp = (t / 4) * 4 + s / g;
    sp = (s % g) * 4 + t % 4;
  }
  return order == "HND" ? h * T * S + tp * S + sp : tp * H * S + h * S + sp;
}

int64_t expected_data_row(const std::string& order, int64_t T, int64_t H, int64_t t, int64_t h) {
  return order == "HND" ? h * T + t : t * H + h;
}

void check_geometry(int64_t H, int64_t D, int64_t T, const std::string& order,
                    const std::string& k_arr, const std::string& v_arr) {
  const CacheSpec spec = spec_of(H, D, T, order, k_arr, v_arr);
  const auto layout = make_layout(spec);
  const kvq_page_desc& d = layout->descriptor();
  const int64_t S = D / 16;
  const uint64_t side_bytes = static_cast<uint64_t>(H * T * D / 2 + H * T * S);
  ASSERT_EQ(layout->page_bytes(), 2 * side_bytes);
  ASSERT_EQ(layout->cache_bytes(), 3 * 2 * side_bytes);
  ASSERT_EQ(layout->groups(), S);

  // Regions: K data, K scales, V data, V scales, back to back from 0 to page_bytes.
  const auto regions = layout->regions();
  ASSERT_EQ(regions.size(), 4u);
  const char* names[4] = {"K data", "K scales", "V data", "V scales"};
  uint64_t at = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(regions[r].name, names[r]);
    EXPECT_EQ(regions[r].offset, at);
    at += regions[r].bytes;
  }
  ASSERT_EQ(at, layout->page_bytes());
  EXPECT_EQ(regions[1].arrangement, order + " " + k_arr);
  EXPECT_EQ(regions[3].arrangement, order + " " + v_arr);

  std::vector<uint8_t> owner(layout->page_bytes(), 0);
  const std::string arrangement[2] = {k_arr, v_arr};
  for (int side = 0; side < 2; ++side) {
    const Region& data_region = regions[2 * side];
    const Region& scale_region = regions[2 * side + 1];
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t g = 0; g < S; ++g) {
          const uint64_t data = layout->data_offset(static_cast<Side>(side), t, h, g);
          const uint64_t scale = layout->scale_offset(static_cast<Side>(side), t, h, g);
          // The descriptor's own functions (what kernels call) agree with the host layout.
          const auto ut = static_cast<uint32_t>(t), uh = static_cast<uint32_t>(h);
          ASSERT_EQ(data, kvq_data_offset(&d.side[side], ut, uh) + 8 * static_cast<uint64_t>(g));
          ASSERT_EQ(scale, kvq_scale_offset(&d.side[side], ut, uh, static_cast<uint32_t>(g)));
          ASSERT_EQ(data - data_region.offset,
                    static_cast<uint64_t>(expected_data_row(order, T, H, t, h) * D / 2 + 8 * g));
          ASSERT_EQ(scale - scale_region.offset, static_cast<uint64_t>(expected_scale(
                                                     order, arrangement[side], T, H, S, t, h, g)))
              << "side " << side << " t " << t << " h " << h << " g " << g;
          ASSERT_GE(data, data_region.offset);
          ASSERT_LE(data + 8, data_region.offset + data_region.bytes);
          ASSERT_GE(scale, scale_region.offset);
          ASSERT_LT(scale, scale_region.offset + scale_region.bytes);
          for (uint64_t b = data; b < data + 8; ++b) {
            ASSERT_EQ(owner[b]++, 0) << "data byte " << b << " written twice";
          }
          ASSERT_EQ(owner[scale]++, 0) << "scale byte " << scale << " written twice";
        }
      }
    }
  }
  for (uint64_t b = 0; b < owner.size(); ++b) ASSERT_EQ(owner[b], 1) << "byte " << b << " unused";
}

TEST(PageLayoutGeometry, SweepCoversEveryByteOnceAndMatchesTheClosedForms) {
  int checked = 0;
  for (int64_t H : {1, 2, 4, 8}) {
    for (int64_t D : {16, 32, 64, 80, 128, 256}) {
      for (int64_t T : {1, 3, 4, 6, 8, 12, 16, 20, 32, 64, 128}) {
        for (const char* order : {"HND", "NHD"}) {
          for (const char* k : {"linear", "sm100_swizzled"}) {
            for (const char* v : {"linear", "sm100_swizzled"}) {
              const bool swizzled = std::string(k) != "linear" || std::string(v) != "linear";
              if (swizzled && (T % 4 != 0 || D % 64 != 0)) continue;  // refused, tested below
              SCOPED_TRACE(testing::Message() << "H " << H << " D " << D << " T " << T << " "
                                              << order << " k " << k << " v " << v);
              check_geometry(H, D, T, order, k, v);
              if (HasFatalFailure()) return;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 1104);  // 528 linear-only + 576 with a swizzled side
}

TEST(PageLayoutGeometry, Sm100DefaultMatchesTheFormatDoc) {
  // HND, K linear, V sm100_swizzled; H 8, D 128, T 16: side = 8*16*64 + 8*16*8 = 9216.
  const auto layout = make_layout(spec_of(8, 128, 16, "HND", "linear", "sm100_swizzled", 1024));
  EXPECT_EQ(layout->page_bytes(), 18432u);
  EXPECT_EQ(layout->cache_bytes(), 18432u * 1024u);
  const auto r = layout->regions();
  EXPECT_EQ(r[0].offset, 0u);
  EXPECT_EQ(r[1].offset, 8192u);
  EXPECT_EQ(r[2].offset, 9216u);
  EXPECT_EQ(r[3].offset, 17408u);
  EXPECT_EQ(r[3].arrangement, "HND sm100_swizzled");
  // The doc's swizzle check: S 8, T 16, token 5, group 3 -> (t', s') = (5, 5), tile offset 45.
  EXPECT_EQ(layout->scale_offset(Side::v, 5, 0, 3), 17408u + 45u);
  EXPECT_EQ(layout->scale_offset(Side::k, 5, 0, 3), 8192u + 5u * 8u + 3u);
  EXPECT_EQ(layout->scale_offset(Side::v, 5, 2, 3), 17408u + 2u * 128u + 45u);
  EXPECT_EQ(layout->data_offset(Side::k, 5, 0, 3), 5u * 64u + 24u);
  EXPECT_EQ(layout->data_offset(Side::v, 5, 1, 3), 9216u + 16u * 64u + 5u * 64u + 24u);
  // The 4 tokens' scales of one group form one 32-bit word.
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_EQ(layout->scale_offset(Side::v, 8 + t, 0, 6), 17408u + 2u * 32u + 24u + t);
  }
}

TEST(PageLayoutGeometry, MetadataDescribesTheLayoutFully) {
  const auto layout = make_layout(spec_of(4, 64, 8, "NHD", "sm100_swizzled", "linear", 10));
  const std::map<std::string, std::string> expected = {
      {"format", "nvfp4"},    {"order", "NHD"},     {"k_scales", "sm100_swizzled"},
      {"v_scales", "linear"}, {"num_blocks", "10"}, {"block_size", "8"},
      {"num_kv_heads", "4"},  {"head_size", "64"},  {"group_size", "16"},
      {"page_bytes", "2304"}};  // 2 * (4*8*32 + 4*8*4)
  EXPECT_EQ(layout->metadata(), expected);
  EXPECT_EQ(layout->format(), "nvfp4");
  EXPECT_EQ(layout->group_size(), 16);
  EXPECT_EQ(layout->data_bytes_per_group(), 8);
  const PageGeometry& g = layout->geometry();
  EXPECT_EQ(g.num_blocks, 10);
  EXPECT_EQ(g.block_size, 8);
  EXPECT_EQ(g.num_kv_heads, 4);
  EXPECT_EQ(g.head_size, 64);
}

TEST(PageLayoutGeometry, IndicesOutsideThePageAreErrorsNamingTheBound) {
  const auto layout = make_layout(spec_of(2, 64, 8, "HND", "linear", "sm100_swizzled"));
  try {
    (void)layout->data_offset(Side::k, 8, 0, 0);
    FAIL() << "token 8 of block_size 8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_range);
    EXPECT_STREQ(e.what(), "token 8 out of range: expected 0 <= token < 8 (block_size)");
  }
  EXPECT_THROW((void)layout->scale_offset(Side::v, 0, 2, 0), Error);
  EXPECT_THROW((void)layout->scale_offset(Side::v, 0, 0, 4), Error);
  EXPECT_THROW((void)layout->data_offset(Side::v, -1, 0, 0), Error);
}

}  // namespace
}  // namespace kvq
