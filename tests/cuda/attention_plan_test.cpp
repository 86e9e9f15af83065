// The attention's host planning, without a GPU: which geometries the kernels take, how calls are
// split (one long sequence fills the device; many sequences are not split), the workspace that
// needs, and the descriptor's copy widths and scale paths.
#include "attention_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "attention_query_scale.h"
#include "e2m1_to_e4m3.h"
#include "kvq/core/page_layout.h"
#include "kvq/layouts/fp8_codec.h"
#include "kvq/layouts/nvfp4_codec.h"

namespace kvq::cuda {
namespace {

kvq_page_desc page(const char* format, int64_t head_size, const char* order = "HND") {
  CacheSpec spec;
  spec.format = format;
  spec.num_blocks = 1024;
  spec.block_size = 16;
  spec.num_kv_heads = 8;
  spec.head_size = head_size;
  spec.layout.order = order;
  return PageLayout::from_spec(spec).descriptor();
}

TEST(AttentionPlan, HeadSizesOtherThanTheBuiltOnesAreRefusedNamingTheKey) {
  EXPECT_TRUE(check_attention_geometry(page("nvfp4", 128)).is_ok());
  const Status s = check_attention_geometry(page("fp8_e4m3", 96));
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.key(), "cache.head_size");
  EXPECT_NE(s.message().find("head_size 96: expected 64, 128 or 256"), std::string::npos);
}

TEST(AttentionPlan, OneLongSequenceIsSplitToFillTheDevice) {
  SplitPlan p;
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 1, 32, 131072 / 16, 264, &p).is_ok());
  EXPECT_EQ(p.head_tiles, 1);
  EXPECT_GE(p.num_splits * 8, 264 * 9 / 10);  // 8 kv heads x splits: about one wave
  EXPECT_LE(p.num_splits * 8, 264);
  EXPECT_EQ(p.split_tokens % 64, 0);
  EXPECT_GE(static_cast<int64_t>(p.num_splits) * p.split_tokens, 131072);
  EXPECT_EQ(p.workspace_bytes, (static_cast<uint64_t>(32) * p.num_splits * 128 * 4 + 15) / 16 * 16 +
                                   static_cast<uint64_t>(32) * p.num_splits * 4);
}

TEST(AttentionPlan, WholeWavesAreNotSplitAndALoneShortContextIs) {
  SplitPlan p;
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 33, 32, 32768 / 16, 264, &p).is_ok());
  EXPECT_EQ(p.num_splits, 1);  // 33 x 8 = 264 CTAs: one whole wave
  EXPECT_EQ(p.workspace_bytes, 0u);
  // 1 x 256 tokens: 8 CTAs would leave the device idle; 64-token splits give each warp a tile.
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 1, 32, 256 / 16, 264, &p).is_ok());
  EXPECT_EQ(p.num_splits, 4);
  EXPECT_EQ(p.split_tokens, 64);
}

TEST(AttentionPlan, AMostlyEmptyLastWaveIsAvoidedBySplitting) {
  SplitPlan p;  // 128 x 8 = 1024 CTAs = 3.9 waves of 264 unsplit: whole waves when split
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 40, 32, 4096 / 16, 264, &p).is_ok());
  const int64_t ctas = 40 * 8 * p.num_splits;
  EXPECT_GE(static_cast<double>(ctas) / 264 / std::ceil(static_cast<double>(ctas) / 264), 0.9)
      << p.num_splits << " splits";
}

TEST(AttentionPlan, SplitCallsStayWithinEightWaves) {
  SplitPlan p;  // 128 x 8 = 1024 CTAs unsplit; the least estimate would take ~28 splits
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 128, 32, 131072 / 16, 396, &p).is_ok());
  EXPECT_GT(p.num_splits, 1);
  EXPECT_LE(int64_t{128} * 8 * p.num_splits, 8 * 396);
}

// The contract: a workspace of workspace_bytes(largest shape) serves every smaller call of the
// same num_q_heads -- also where the largest shape is not split and a smaller one is (33 x 2048
// blocks fill whole waves unsplit; 1 x 2048 blocks split).
TEST(AttentionPlan, OneWorkspaceForTheLargestShapeServesEverySmallerOne) {
  for (const char* format : {"nvfp4", "bf16"}) {
    for (int64_t head_size : {64, 256}) {
      const kvq_page_desc d = page(format, head_size);
      for (int32_t target : {132, 264, 396}) {
        for (int64_t q : {8, 32, 64, 8 * 20}) {
          for (auto [seqs, blocks] : {std::pair<int64_t, int64_t>{33, 2048},
                                      {128, 8192},
                                      {1, 4},
                                      {1, 5},
                                      {7, 300},
                                      {2000, 64}}) {
            SCOPED_TRACE(fmt::format("{} D {}, target {}, q {}, largest {} x {} blocks", format,
                                     head_size, target, q, seqs, blocks));
            uint64_t bound = 0;
            ASSERT_TRUE(workspace_bound(d, seqs, q, blocks, target, &bound).is_ok());
            for (int64_t s = 1; s <= seqs; s = s < 8 ? s + 1 : s * 3 / 2) {
              for (int64_t b = 1; b <= blocks; b = b < 8 ? b + 1 : b * 5 / 4) {
                SplitPlan p;
                ASSERT_TRUE(plan_splits(d, s, q, b, target, &p).is_ok());
                ASSERT_LE(p.workspace_bytes, bound) << s << " x " << b << " blocks";
              }
            }
          }
        }
      }
    }
  }
  uint64_t bound = 0;  // 33 x 2048 is not split, 1 x 2048 is: the bound covers the latter
  ASSERT_TRUE(workspace_bound(page("nvfp4", 128), 33, 32, 2048, 264, &bound).is_ok());
  SplitPlan one;
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 1, 32, 2048, 264, &one).is_ok());
  EXPECT_GT(one.workspace_bytes, 0u);
  EXPECT_GE(bound, one.workspace_bytes);
  // However large the shape, a constant of the device: 8 waves x 16 heads' rows of 128 f32 + 1.
  ASSERT_TRUE(workspace_bound(page("nvfp4", 128), 65535, 8 * 16, 1 << 20, 264, &bound).is_ok());
  EXPECT_LE(bound, uint64_t{8} * 264 * 16 * (128 * 4 + 4) + 16);
  ASSERT_TRUE(workspace_bound(page("nvfp4", 128), 4, 32, 4, 264, &bound).is_ok());
  EXPECT_EQ(bound, 0u) << "64 tokens: nothing splits";
}

// What the kernel's prologue runs for bf16 queries: 2^shift puts a head's largest magnitude in
// [2^14, 2^15), every bf16 value from 2^-133 to 3.4e38, and leaves zeros, NaN and infinity be.
TEST(AttentionQueryScale, ThePowerOfTwoPutsTheLargestMagnitudeInF16sTopOctave) {
  for (float top = std::ldexp(1.0f, -133); top < 3.4e38f; top *= 1.37f) {
    const float bf16 = std::ldexp(std::round(std::ldexp(top, -std::ilogb(top) + 7)),
                                  std::ilogb(top) - 7);  // 8 significant bits
    const int shift = query_shift(bf16);
    ASSERT_GE(shift, -126);
    ASSERT_LE(shift, 126);
    EXPECT_EQ(pow2(shift), std::ldexp(1.0f, shift));
    EXPECT_EQ(pow2(-shift), std::ldexp(1.0f, -shift));
    const float scaled = bf16 * pow2(shift);
    if (shift < 126) {  // the smallest tops stay below 2^14 at the largest shift
      EXPECT_GE(scaled, 16384.0f) << bf16;
    }
    EXPECT_LT(scaled, 32768.0f) << bf16;
    EXPECT_EQ(scaled * pow2(-shift), bf16) << "exact both ways";
  }
  EXPECT_EQ(query_shift(0.0f), 0);
  EXPECT_EQ(query_shift(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(query_shift(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(query_shift(1.0f), 14);
  EXPECT_EQ(query_shift(3.3895314e38f), -113);  // the largest bf16: 2^127 x (2 - 2^-7)
}

// The nvfp4 decode's first step: every code in every position becomes the E4M3 byte of its value
// / 64, the sign of zero included, and nothing of the neighbouring codes leaks in.
TEST(AttentionE2m1ToE4m3, EveryCodeInEveryPositionIsItsValueOver64) {
  for (uint32_t low = 0; low < (1u << 16); ++low) {
    const uint32_t word = low | ((low ^ 0xA5C3u) * 0x9E37u & 0xFFFFu) << 16;
    for (const bool odd : {false, true}) {
      const uint32_t bytes = e2m1x4_to_e4m3x4(word, odd);
      for (int k = 0; k < 4; ++k) {
        const auto code = static_cast<uint8_t>((word >> (4 * (2 * k + (odd ? 1 : 0)))) & 0xFu);
        const auto e4m3 = static_cast<uint8_t>(bytes >> (8 * k));
        const float want = e2m1_to_float(code) / 64.0f;
        ASSERT_EQ(e4m3_to_float(e4m3), want) << "word " << word << " element " << 2 * k + odd;
        ASSERT_EQ(std::signbit(e4m3_to_float(e4m3)), std::signbit(want)) << "word " << word;
      }
    }
  }
}

// Its second step multiplies in f16: an E2M1 value / 64 times any finite E4M3 scale is an f16
// value, so the product is exact.
TEST(AttentionE2m1ToE4m3, ScaledValuesAreExactInF16) {
  for (int code = 0; code < 16; ++code) {
    for (int scale = 0; scale < 256; ++scale) {
      const float s = e4m3_to_float(static_cast<uint8_t>(scale));
      if (std::isnan(s)) continue;
      const float v = e2m1_to_float(static_cast<uint8_t>(code)) / 64.0f * s;
      ASSERT_LE(std::fabs(v), 65504.0f);
      if (v == 0.0f) continue;
      const int e = std::max(std::ilogb(v), -14);  // f16: 11 significant bits, down to 2^-24
      const float steps = std::ldexp(v, 10 - e);
      EXPECT_EQ(steps, std::round(steps)) << "code " << code << " scale byte " << scale;
    }
  }
}

TEST(AttentionPlan, GroupsPastSixteenHeadsTakeSeveralTiles) {
  SplitPlan p;
  ASSERT_TRUE(plan_splits(page("bf16", 64), 4, 8 * 40, 10, 264, &p).is_ok());
  EXPECT_EQ(p.head_tiles, 3);
}

TEST(AttentionPlan, LaunchLimitsAreRefused) {
  SplitPlan p;
  EXPECT_EQ(plan_splits(page("nvfp4", 128), 70000, 8, 4, 264, &p).code(),
            ErrorCode::invalid_argument);
  EXPECT_EQ(plan_splits(page("nvfp4", 128), 1, 12, 4, 264, &p).code(), ErrorCode::invalid_argument);
}

TEST(AttentionPlan, CopyWidthsAndScalePathsFollowTheLayoutAndTheCachePointer) {
  const kvq_page_desc d = page("nvfp4", 128);  // HND, K linear, V sm100_swizzled
  alignas(16) static uint8_t cache[32];
  AttentionArgs a;
  a.cache = make_view(cache, DType::u8, {1, 1});
  a.query = make_view(cache, DType::bf16, {1, 8, 128});
  a.output = a.query;
  a.block_tables = make_view(cache, DType::i32, {1, 1});
  a.seq_lens = make_view(cache, DType::i32, {1});
  a.softmax_scale = 0.1f;
  SplitPlan p;
  AttentionKernelDesc k{};
  ASSERT_TRUE(plan_attention(a, d, p, nullptr, &k).is_ok());
  EXPECT_EQ(k.data_access, 16);
  EXPECT_EQ(k.scale_copy[0], kScalesLinearWords);
  EXPECT_EQ(k.scale_copy[1], kScalesQuadWords);
  a.cache.data = cache + 2;  // a 2-byte aligned cache: 2-byte copies, scale bytes one at a time
  ASSERT_TRUE(plan_attention(a, d, p, nullptr, &k).is_ok());
  EXPECT_EQ(k.data_access, 2);
  EXPECT_EQ(k.scale_copy[0], kScalesBytes);
  EXPECT_EQ(k.scale_copy[1], kScalesBytes);
  ASSERT_TRUE(plan_attention(a, page("fp8_e4m3", 64), p, nullptr, &k).is_ok());
  EXPECT_EQ(k.scale_copy[0], kScalesNone);
}

}  // namespace
}  // namespace kvq::cuda
