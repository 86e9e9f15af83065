// The six worked vectors of shared/design/nvfp4-format.md, byte for byte, plus the consequences
// the doc lists (all-zero, underflow, infinity, NaN) and the step functions agreeing with
// nvfp4_quantize_group.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

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
