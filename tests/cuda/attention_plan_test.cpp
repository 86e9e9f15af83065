// The attention's host planning, without a GPU: which geometries the kernels take, how calls are
// split (one long sequence fills the device; many sequences are not split), the workspace that
// needs, and the descriptor's copy widths and scale paths.
#include "attention_plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kvq/core/page_layout.h"

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

TEST(AttentionPlan, ShortContextsAndWholeWavesAreNotSplit) {
  SplitPlan p;
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 33, 32, 32768 / 16, 264, &p).is_ok());
  EXPECT_EQ(p.num_splits, 1);  // 33 x 8 = 264 CTAs: one whole wave
  EXPECT_EQ(p.workspace_bytes, 0u);
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 1, 32, 256 / 16, 264, &p).is_ok());
  EXPECT_EQ(p.num_splits, 1);
}

TEST(AttentionPlan, AMostlyEmptyLastWaveIsAvoidedBySplitting) {
  SplitPlan p;  // 128 x 8 = 1024 CTAs = 3.9 waves of 264 unsplit: whole waves when split
  ASSERT_TRUE(plan_splits(page("nvfp4", 128), 40, 32, 4096 / 16, 264, &p).is_ok());
  const int64_t ctas = 40 * 8 * p.num_splits;
  EXPECT_GE(static_cast<double>(ctas) / 264 / std::ceil(static_cast<double>(ctas) / 264), 0.9)
      << p.num_splits << " splits";
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
