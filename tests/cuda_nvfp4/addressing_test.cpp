// The kernels' sums-of-products addressing (kernel_desc.h SideAddressing) equals the layouts
// library's descriptor offsets for every (side, token, head, group) of many layouts; and the
// FastDivmod the kernels divide with equals integer division.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "kvq/layouts/nvfp4_page_layout.h"
#include "write_plan.h"

namespace kvq::cuda_nvfp4 {
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
              std::unique_ptr<Nvfp4PageLayout> layout;
              try {
                layout = std::make_unique<Nvfp4PageLayout>(spec);
              } catch (const Error&) {  // a geometry the arrangement cannot hold
                ++refused;
                continue;
              }
              const Nvfp4LayoutDesc& d = layout->descriptor();
              PageAddressing p;
              ASSERT_TRUE(make_page_addressing(d, &p).is_ok());
              for (int s = 0; s < 2; ++s) {
                for (int64_t t = 0; t < T; ++t) {
                  for (int64_t h = 0; h < H; ++h) {
                    for (int64_t g = 0; g < D / 16; ++g) {
                      const auto tt = static_cast<uint32_t>(t), hh = static_cast<uint32_t>(h),
                                 gg = static_cast<uint32_t>(g);
                      ASSERT_EQ(p.side[s].data_offset(tt, hh, gg), d.data_offset(s, t, h, g))
                          << spec.layout.order << " T" << T << " H" << H << " D" << D << " side "
                          << s << " t" << t << " h" << h << " g" << g;
                      ASSERT_EQ(p.side[s].scale_offset(tt, hh, p.side[s].scale_group_term(gg)),
                                d.scale_offset(s, t, h, g))
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

TEST(Addressing, PageOfFourGiBOrMoreIsRefused) {
  Nvfp4LayoutDesc d{};
  d.page_bytes = uint64_t{1} << 32;
  d.block_size = 1 << 20;
  d.num_heads = 64;
  d.head_size = 128;
  d.groups = 8;
  PageAddressing p;
  const Status s = make_page_addressing(d, &p);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(),
            "page_bytes 4294967296 >= 2^32: cuda_nvfp4 addresses a page with 32-bit offsets "
            "(block_size 1048576 x num_kv_heads 64 x head_size 128 is too large)");
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
}  // namespace kvq::cuda_nvfp4
