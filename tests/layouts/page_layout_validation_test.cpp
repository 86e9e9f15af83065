// Geometries and words the NVFP4 layout refuses: each error is invalid_argument, names the config
// key in Error::key() and the rule (and the value found) in its message.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kvq/core/scale_rule.h"
#include "kvq/core/status.h"
#include "kvq/layouts/layout_factory.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq {
namespace {

CacheSpec base() {
  CacheSpec s;
  s.format = "nvfp4";
  s.num_blocks = 16;
  s.block_size = 16;
  s.num_kv_heads = 8;
  s.head_size = 128;
  s.layout = {"HND", "linear", "sm100_swizzled"};
  return s;
}

void expect_refused(const CacheSpec& spec, const std::string& key, const std::string& message) {
  try {
    (void)make_layout(spec);
    ADD_FAILURE() << "accepted; expected refusal at " << key << ": " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.key(), key);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(PageLayoutValidation, SwizzledScalesNeedHeadSizeMultipleOf64) {
  CacheSpec s = base();
  s.head_size = 80;
  expect_refused(s, "cache.head_size",
                 "V scales sm100_swizzled need head_size % 64 == 0 (groups = "
                 "head_size/16 a multiple of 4); found head_size 80");
  s.head_size = 32;
  expect_refused(s, "cache.head_size",
                 "V scales sm100_swizzled need head_size % 64 == 0 (groups = "
                 "head_size/16 a multiple of 4); found head_size 32");
  s.layout = {"NHD", "sm100_swizzled", "linear"};
  s.head_size = 16;
  expect_refused(s, "cache.head_size",
                 "K scales sm100_swizzled need head_size % 64 == 0 (groups = "
                 "head_size/16 a multiple of 4); found head_size 16");
  s.layout = {"HND", "linear", "linear"};
  for (int64_t d : {16, 32, 80}) {
    s.head_size = d;
    EXPECT_NO_THROW((void)make_layout(s)) << "linear scales take head_size " << d;
  }
}

TEST(PageLayoutValidation, SwizzledScalesNeedBlockSizeMultipleOf4) {
  CacheSpec s = base();
  s.block_size = 6;
  expect_refused(s, "cache.block_size",
                 "V scales sm100_swizzled need block_size % 4 == 0 (whole "
                 "4-token blocks); found block_size 6");
  s.layout.v_scales = "linear";
  EXPECT_NO_THROW((void)make_layout(s));
}

// The quantizer multiplies by 1 / scale: a scale whose reciprocal is infinite (subnormal, below
// about 2.94e-39) would turn an all-zero group into NaN bytes; one whose reciprocal's reciprocal
// is infinite (the 3 largest floats) would zero every group's data.
TEST(PageLayoutValidation, ScalesNeedAFiniteReciprocal) {
  CacheSpec s = base();
  s.k_scale = 1e-40f;
  expect_refused(s, "cache.k_scale", "k_scale = 1e-40: " + std::string(kScaleRule));
  s.k_scale = 1.0f;
  s.v_scale = 0.0f;
  expect_refused(s, "cache.v_scale", "v_scale = 0: " + std::string(kScaleRule));
  s.v_scale = 3e-39f;  // just above the bound: 1 / 3e-39 = 3.3e38 < FLT_MAX
  EXPECT_NO_THROW((void)make_layout(s));
  EXPECT_TRUE(nvfp4_scale_usable(3e-39f));
  EXPECT_FALSE(nvfp4_scale_usable(2.9e-39f));
  EXPECT_FALSE(nvfp4_scale_usable(-1.0f));
  EXPECT_FALSE(nvfp4_scale_usable(std::numeric_limits<float>::infinity()));
  EXPECT_FALSE(nvfp4_scale_usable(std::numeric_limits<float>::quiet_NaN()));
  // At the top, 1 / k_scale is a subnormal whose reciprocal overflows for the 3 largest floats:
  // their groups would get a scale byte over all-zero data.
  EXPECT_FALSE(nvfp4_scale_usable(std::numeric_limits<float>::max()));
  EXPECT_FALSE(nvfp4_scale_usable(std::bit_cast<float>(0x7F7FFFFDu)));
  EXPECT_TRUE(nvfp4_scale_usable(std::bit_cast<float>(0x7F7FFFFCu)));  // 3.4028229e38
  s.v_scale = std::numeric_limits<float>::max();
  expect_refused(s, "cache.v_scale", "v_scale = 3.4028235e+38: " + std::string(kScaleRule));
  // Every NaN reads "nan", whatever its sign bit (fmt alone would print "-nan").
  s.v_scale = -std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(std::signbit(s.v_scale));
  expect_refused(s, "cache.v_scale", "v_scale = nan: " + std::string(kScaleRule));
}

// The kernels' one-compare form of the rule agrees with the definition: around both ends of its
// range and at every 4093rd bit pattern (the whole space, 2^32 patterns, agreed when checked once
// by a program that tried each; 1 / x is monotonic, so the usable scales are one range).
TEST(PageLayoutValidation, ScaleRuleAsOneRangeOfBitsMatchesTheDefinition) {
  const auto agrees = [](uint32_t bits) {
    return scale_bits_usable(bits) == nvfp4_scale_usable(std::bit_cast<float>(bits));
  };
  for (uint32_t end : {kUsableScaleBitsFirst, kUsableScaleBitsLast}) {
    for (uint32_t d = 0; d < (1u << 16); ++d) {
      ASSERT_TRUE(agrees(end + d)) << std::hex << end + d;
      ASSERT_TRUE(agrees(end - d)) << std::hex << end - d;
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
    ASSERT_TRUE(agrees(static_cast<uint32_t>(bits))) << std::hex << bits;
  }
  EXPECT_TRUE(scale_bits_usable(kUsableScaleBitsFirst));
  EXPECT_FALSE(scale_bits_usable(kUsableScaleBitsFirst - 1));
  EXPECT_TRUE(scale_bits_usable(kUsableScaleBitsLast));
  EXPECT_FALSE(scale_bits_usable(kUsableScaleBitsLast + 1));
}

TEST(PageLayoutValidation, HeadSizeMustBeAMultipleOf16) {
  CacheSpec s = base();
  s.head_size = 72;
  s.layout.v_scales = "linear";
  expect_refused(s, "cache.head_size",
                 "head_size must be a multiple of 16 (one NVFP4 scale per 16 elements), found 72");
}

TEST(PageLayoutValidation, UnknownWordsListTheKnownOnes) {
  CacheSpec s = base();
  s.layout.v_scales = "swizzled";
  expect_refused(s, "cache.layout.v_scales",
                 "unknown scale arrangement 'swizzled': expected one of linear, sm100_swizzled");
  s = base();
  s.layout.k_scales = "Linear";
  expect_refused(s, "cache.layout.k_scales",
                 "unknown scale arrangement 'Linear': expected one of linear, sm100_swizzled");
  s = base();
  s.layout.order = "HDN";
  expect_refused(s, "cache.layout.order", "unknown order 'HDN': expected one of HND, NHD");
  s = base();
  s.format = "fp8";
  expect_refused(s, "cache.format",
                 "unknown cache format 'fp8': expected one of nvfp4, fp8_e4m3, fp8_e5m2, bf16");
  EXPECT_EQ(known_formats(), (std::vector<std::string>{"nvfp4", "fp8_e4m3", "fp8_e5m2", "bf16"}));
}

TEST(PageLayoutValidation, SizesMustBePositive) {
  CacheSpec s = base();
  s.num_blocks = 0;
  expect_refused(s, "cache.num_blocks", "num_blocks must be >= 1, found 0");
  s = base();
  s.num_kv_heads = -2;
  expect_refused(s, "cache.num_kv_heads", "num_kv_heads must be >= 1, found -2");
}

TEST(PageLayoutValidation, CachesBeyond64BitOffsetsAreRefused) {
  CacheSpec s = base();  // page_bytes 18432 = 2^11 * 9
  s.num_blocks = int64_t{1} << 50;
  expect_refused(s, "cache.num_blocks",
                 "num_blocks 1125899906842624 x page_bytes 18432 exceeds 2^63-1 bytes (64-bit "
                 "offsets); at most 500399958596721 blocks fit");
  s.num_blocks = 500399958596721;
  EXPECT_NO_THROW((void)make_layout(s));
  s = base();
  s.num_blocks = 1;
  s.block_size = int64_t{1} << 30;
  s.num_kv_heads = int64_t{1} << 30;
  s.head_size = 1 << 16;
  s.layout.v_scales = "linear";
  expect_refused(s, "cache.block_size",
                 "one page of block_size 1073741824 x num_kv_heads 1073741824 x head_size 65536 "
                 "needs 2^32 bytes or more (pages use 32-bit offsets)");
  // The largest page that fits: 2^32 - 2^15 bytes, and one token more is refused.
  s.block_size = 7281;  // 7281 x 8 x 128 x 9/8 x 1 = 8386512 bytes: far below
  s.num_kv_heads = 8;
  s.head_size = 128;
  EXPECT_NO_THROW((void)make_layout(s));
  s.block_size = int64_t{1} << 22;  // 2^22 x 8 x 128 x 9 / 8 = 4.8e9 bytes
  expect_refused(s, "cache.block_size",
                 "one page of block_size 4194304 x num_kv_heads 8 x head_size 128 needs 2^32 "
                 "bytes or more (pages use 32-bit offsets)");
}

}  // namespace
}  // namespace kvq

namespace kvq {
namespace {

// Formats without a scale region: their pages and what they refuse.
TEST(PageLayoutValidation, ElementFormatsHaveNoScaleRegion) {
  for (const auto& [format, bytes] :
       {std::pair{"fp8_e4m3", 1}, std::pair{"fp8_e5m2", 1}, std::pair{"bf16", 2}}) {
    CacheSpec s = base();
    s.format = format;
    s.layout = {"NHD", "", ""};
    s.head_size = 72;  // no group rule without groups
    const auto layout = make_layout(s);
    EXPECT_EQ(layout->page_bytes(), 2u * 16 * 8 * 72 * bytes) << format;
    EXPECT_FALSE(layout->has_scales());
    EXPECT_EQ(PageLayout::resolved(s).layout.k_scales, "none");

    s.layout.k_scales = "linear";
    expect_refused(
        s, "cache.layout.k_scales",
        std::string(format) + " pages have no scale region: remove k_scales (found 'linear')");
    s.layout = {"HND", "", "sm100_swizzled"};
    expect_refused(s, "cache.layout.v_scales",
                   std::string(format) +
                       " pages have no scale region: remove v_scales (found 'sm100_swizzled')");
  }
}

TEST(PageLayoutValidation, Bf16PagesAreNotScaled) {
  CacheSpec s = base();
  s.format = "bf16";
  s.layout = {"HND", "", ""};
  s.v_scale = 0.5f;
  expect_refused(s, "cache.v_scale",
                 "bf16 pages are not scaled: expected v_scale 1 (or no key), found 0.5");
  s.v_scale = 1.0f;
  s.format = "fp8_e4m3";
  s.k_scale = 0.5f;
  EXPECT_NO_THROW((void)make_layout(s));
}

}  // namespace
}  // namespace kvq
