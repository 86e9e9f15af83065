// The kernels' addressing (kernel_desc.h SideAddressing: the page descriptor's maps with the group
// division done by FastDivmod) equals the host layout's offsets for every (side, token, head,
// group) of many layouts; and the FastDivmod the kernels divide with equals integer division.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "kvq/core/page_layout.h"
#include "write_plan.h"

namespace kvq::cuda {
namespace {

TEST(Addressing, EqualsTheDescriptorForEveryPositionOfManyLayouts) {
  int layouts = 0, refused = 0;
  for (const char* order : {"HND", "NHD"}) {
    for (const char* k_arr : {"linear", "sm100_swizzled"}) {
      for (const char* v_arr : {"linear", "sm100_swizzled"}) {
        for (int64_t T : {1, 3, 4, 8, 16, 64}) {
          for (int64_t H : {1, 3, 8}) {
            for (int64_t D : {16, 48, 64, 80, 128, 256}) {
              CacheSpec spec;
              spec.num_blocks = 3;
              spec.block_size = T;
              spec.num_kv_heads = H;
              spec.head_size = D;
              spec.layout = {order, k_arr, v_arr};
              std::unique_ptr<PageLayout> layout;
              try {
                layout = std::make_unique<PageLayout>(PageLayout::from_spec(spec));
              } catch (const Error&) {  // a geometry the arrangement cannot hold
                ++refused;
                continue;
              }
              const PageLayout& d = *layout;
              PageAddressing p;
              ASSERT_TRUE(make_page_addressing(d.descriptor(), &p).is_ok());
              const Side sides[2] = {Side::k, Side::v};
              for (int s = 0; s < 2; ++s) {
                for (int64_t t = 0; t < T; ++t) {
                  for (int64_t h = 0; h < H; ++h) {
                    for (int64_t g = 0; g < D / 16; ++g) {
                      const auto tt = static_cast<uint32_t>(t), hh = static_cast<uint32_t>(h),
                                 gg = static_cast<uint32_t>(g);
                      ASSERT_EQ(p.side[s].data_offset(tt, hh, gg), d.data_offset(sides[s], t, h, g))
                          << spec.layout.order << " T" << T << " H" << H << " D" << D << " side "
                          << s << " t" << t << " h" << h << " g" << g;
                      ASSERT_EQ(p.side[s].scale_offset(tt, hh, p.side[s].scale_group_term(gg)),
                                d.scale_offset(sides[s], t, h, g))
                          << order << " K " << k_arr << " V " << v_arr << " T" << T << " H" << H
                          << " D" << D << " side " << s << " t" << t << " h" << h << " g" << g;
                    }
                  }
                }
              }
              ++layouts;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(layouts, 200);
  EXPECT_GT(refused, 0);  // the sm100_swizzled rule was met (block_size or head_size / 16 % 4)
}

TEST(Addressing, OtherFormatsAreRefusedAtTheFormatKey) {
  kvq_page_desc d{};
  int32_t side = 0;
  ASSERT_EQ(kvq_page_desc_init(&d, KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, KVQ_SCALES_NONE,
                               KVQ_SCALES_NONE, 4, 16, 8, 128, &side),
            KVQ_PAGE_OK);
  PageAddressing p;
  const Status s = make_page_addressing(d, &p);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.key(), "cache.format");
  EXPECT_EQ(s.message(), "the NVFP4 kernels take nvfp4 pages, not fp8_e4m3");
}

TEST(FastDivmod, EqualsIntegerDivision) {
  std::mt19937 rng(1);
  for (uint32_t d : {1u, 2u, 3u, 5u, 7u, 8u, 12u, 16u, 100u, 255u, 1000003u, 0x7FFFFFFFu}) {
    const FastDivmod f = FastDivmod::make(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0x7FFFFFFEu, 0x7FFFFFFFu}) {
      if (n > 0x7FFFFFFFu) continue;
      uint32_t q, r;
      f.divmod(n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
    for (int i = 0; i < 100000; ++i) {
      const uint32_t n = rng() & 0x7FFFFFFFu;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace kvq::cuda
