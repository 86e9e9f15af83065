// The six worked vectors of docs/format.md ("Worked vectors"), byte for byte, plus the
// consequences the doc lists (all-zero, underflow, infinity, NaN) and the step functions
// agreeing with nvfp4_quantize_group.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq {
namespace {

struct Vector {
  const char* name;
  std::array<float, 16> x;
  float k_scale;
  uint8_t scale;
  std::array<uint8_t, 8> data;
};

const std::vector<Vector>& worked_vectors() {
  static const std::vector<Vector> v = {
      {"ramp",
       {0, .25f, .5f, .75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.5f, 3, 3.5f, 4, 5, 6, -6},
       1.0f,
       0x38,
       {0x00, 0x21, 0x22, 0x43, 0x44, 0x65, 0x66, 0xf7}},
      {"mixed",
       {7, -7, 1, .5f, .25f, 2, 3, 4, 5, 6, 1.5f, -1, 0, -.25f, .75f, 1.25f},
       1.0f,
       0x39,
       {0xf7, 0x12, 0x40, 0x65, 0x76, 0xa3, 0x80, 0x21}},
      {"zeros", {}, 1.0f, 0x00, {}},
      {"3000 then zeros", {3000}, 1.0f, 0x7e, {0x07}},
      {"underflow keeps signs", {.005f, -.004f}, 1.0f, 0x00, {0x80}},
      {"k_scale 2/448",
       {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -0.5f},
       2.0f / 448.0f,
       0x61,
       {0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0xd7}},
  };
  return v;
}

TEST(WorkedVectors, ReproduceByteForByte) {
  for (const Vector& v : worked_vectors()) {
    SCOPED_TRACE(v.name);
    const Nvfp4Group g = nvfp4_quantize_group(v.x.data(), nvfp4_global_scale(v.k_scale));
    EXPECT_EQ(g.scale, v.scale);
    for (int k = 0; k < 8; ++k) EXPECT_EQ(g.data[k], v.data[k]) << "data byte " << k;
  }
}

TEST(WorkedVectors, StepFunctionsMatchTheGroupQuantizer) {
  for (const Vector& v : worked_vectors()) {
    SCOPED_TRACE(v.name);
    const float global = nvfp4_global_scale(v.k_scale);
    float amax = 0.0f;
    for (float x : v.x) amax = nvfp4_amax(amax, x);
    const uint8_t scale = nvfp4_scale_byte(amax, global);
    const float out = nvfp4_output_scale(scale, global);
    EXPECT_EQ(scale, v.scale);
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(nvfp4_pack_pair(v.x[2 * k], v.x[2 * k + 1], out), v.data[k]) << "byte " << k;
    }
  }
}

TEST(WorkedVectors, InfinitySaturatesScaleAndElement) {
  std::array<float, 16> x{};
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = -std::numeric_limits<float>::infinity();
  x[2] = 1.0f;
  const Nvfp4Group g = nvfp4_quantize_group(x.data(), 1.0f);
  EXPECT_EQ(g.scale, 0x7e);    // 448
  EXPECT_EQ(g.data[0], 0xf7);  // +6 low, -6 high
  EXPECT_EQ(g.data[1], 0x00);  // 1/448 rounds to 0
}

TEST(WorkedVectors, NanIsIgnoredByAmaxAndEncodesAsPlusSix) {
  std::array<float, 16> x{};
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[1] = -std::numeric_limits<float>::quiet_NaN();
  x[2] = 6.0f;
  x[3] = -3.0f;
  const Nvfp4Group g = nvfp4_quantize_group(x.data(), 1.0f);
  EXPECT_EQ(g.scale, 0x38);    // amax 6 -> sf 1.0
  EXPECT_EQ(g.data[0], 0x77);  // both NaNs -> +6 (0x7), never the sign
  EXPECT_EQ(g.data[1], 0xd7);  // 6 -> 0x7, -3 -> 0xd

  std::array<float, 16> all_nan;
  all_nan.fill(std::numeric_limits<float>::quiet_NaN());
  const Nvfp4Group n = nvfp4_quantize_group(all_nan.data(), 1.0f);
  EXPECT_EQ(n.scale, 0x00);  // amax of all-NaN is 0
  for (uint8_t b : n.data) EXPECT_EQ(b, 0x77);
}

TEST(WorkedVectors, SfRawBelowTwoToMinusTenGivesAllZeros) {
  std::array<float, 16> x{};
  x[5] = 0.00585f;  // amax/6 = 2^-10 * 0.998 -> scale 0 -> every element 0 (sign kept)
  x[6] = -0.001f;
  const Nvfp4Group g = nvfp4_quantize_group(x.data(), 1.0f);
  EXPECT_EQ(g.scale, 0x00);
  EXPECT_EQ(g.data[2], 0x00);
  EXPECT_EQ(g.data[3], 0x08);
}

// Step 2 multiplies by R6 = float32(1/6) rounded to nearest (0x3E2AAAAB, just above 1/6). For
// amax = 69/64 the exact amax / 6 = 0.1796875 is an E4M3 tie (0x23 = 0.171875, 0x24 = 0.1875):
// with R6 the product rounds onto the tie, which goes to the even 0x24; with the float just
// below 1/6 it would round under it, to 0x23.
TEST(WorkedVectors, StepTwoMultipliesByOneSixthRoundedToNearest) {
  EXPECT_EQ(nvfp4_scale_byte(1.078125f, 1.0f), 0x24);
}

// Step 4 as the format states it, 1 / (sf * (1 / global)) with a rounding after each operation,
// for every E4M3 scale and a spread of dequantization scales: the algebraically equal
// global * (1 / sf) or global / sf round differently for some of them.
TEST(WorkedVectors, StepFourRoundsInTheFormatsOrder) {
  int differs_from_shortcut = 0;
  for (float k_scale : {1.0f, 2.0f / 448.0f, 0.1f, 3.0f, 1.0f / 3.0f, 7e-3f, 123.456f}) {
    const volatile float global = nvfp4_global_scale(k_scale);  // volatile: no folding
    for (int b = 1; b < 0x7F; ++b) {
      const float sf = e4m3_to_float(static_cast<uint8_t>(b));
      const volatile float inv_global = 1.0f / global;
      const volatile float product = sf * inv_global;
      const float expected = 1.0f / product;
      const volatile float inv_sf = 1.0f / sf;
      differs_from_shortcut += global * inv_sf != expected ? 1 : 0;
      ASSERT_EQ(nvfp4_output_scale(static_cast<uint8_t>(b), global), expected)
          << "scale byte " << b << ", k_scale " << k_scale;
    }
  }
  EXPECT_GT(differs_from_shortcut, 0) << "no case tells the orders apart";
  EXPECT_EQ(nvfp4_output_scale(0x00, 1.0f), 0.0f);
}

TEST(WorkedVectors, DequantizeIsCodeTimesScaleTimesKScale) {
  EXPECT_EQ(nvfp4_dequantize(0x7, 0x38, 1.0f), 6.0f);
  EXPECT_EQ(nvfp4_dequantize(0xd, 0x38, 2.0f), -6.0f);   // -3 * 1 * 2
  EXPECT_EQ(nvfp4_dequantize(0x1, 0x7e, 0.5f), 112.0f);  // 0.5 * 448 * 0.5
  EXPECT_EQ(nvfp4_dequantize(0x8, 0x00, 1.0f), -0.0f);
  EXPECT_TRUE(std::signbit(nvfp4_dequantize(0x8, 0x00, 1.0f)));
  EXPECT_EQ(nvfp4_dequantize(0xf7, 0x38, 1.0f), 6.0f) << "only the low nibble is the code";
}

}  // namespace
}  // namespace kvq

namespace kvq {
namespace {

// docs/format.md "Worked vectors (fp8 and bf16)": x, the scale, and the code each format stores.
struct ElementVector {
  float x;
  float scale;
  uint8_t e4m3, e5m2;
  uint16_t bf16;  // scale 1 only
};

TEST(WorkedVectors, ElementFormatsByteForByte) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const ElementVector vectors[] = {
      {1.0f, 1.0f, 0x38, 0x3c, 0x3f80},    {-2.5f, 1.0f, 0xc2, 0xc1, 0xc020},
      {0.3f, 1.0f, 0x2a, 0x35, 0x3e9a},    {448.0f, 1.0f, 0x7e, 0x5f, 0x43e0},
      {1000.0f, 1.0f, 0x7e, 0x64, 0x447a}, {57344.0f, 1.0f, 0x7e, 0x7b, 0x4760},
      {-inf, 1.0f, 0xfe, 0xfb, 0xff80},    {0.001f, 1.0f, 0x01, 0x14, 0x3a83},
      {-0.0f, 1.0f, 0x80, 0x80, 0x8000},   {nan, 1.0f, 0x7f, 0x7f, 0x7fc0},
      {1.0f, 0.5f, 0x40, 0x40, 0},         {3.0f, 3.0f / 448.0f, 0x7e, 0x5f, 0},
  };
  for (const ElementVector& v : vectors) {
    SCOPED_TRACE(testing::Message() << "x " << v.x << " scale " << v.scale);
    EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E4M3>::encode(v.x, v.scale), v.e4m3);
    EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E5M2>::encode(v.x, v.scale), v.e5m2);
    if (v.scale == 1.0f) {
      EXPECT_EQ(ElementCodec<KVQ_FORMAT_BF16>::encode(v.x, 1.0f), v.bf16);
    }
  }
  // Decoding: code * scale.
  EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E4M3>::decode(0x40, 0.5f), 1.0f);
  EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E4M3>::decode(0x2a, 1.0f), 0.3125f);
  EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E5M2>::decode(0x35, 1.0f), 0.3125f);
  EXPECT_EQ(ElementCodec<KVQ_FORMAT_FP8_E4M3>::decode(0x7e, 3.0f / 448.0f), 3.0f);
  EXPECT_TRUE(std::isnan(ElementCodec<KVQ_FORMAT_FP8_E5M2>::decode(0x7f, 1.0f)));
}

}  // namespace
}  // namespace kvq
