// Decoders invert encoders on every code, the decoded values are the ones the format defines, and
// the encoders round at exactly the boundaries the format doc lists -- checked without CUDA, so
// these hold even where the exhaustive comparison skips.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kvq/layouts/nvfp4_codec.h"

namespace kvq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float next_up(float f) {
  return std::nextafter(f, kInf);
}
float next_down(float f) {
  return std::nextafter(f, -kInf);
}

// E4M3 value from its fields, written independently of the codec.
double e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 0xF, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, int(e) - 7);
  return (code & 0x80) ? -mag : mag;
}

TEST(E4m3, DecodesEveryCodeToItsValueAndBack) {
  for (unsigned c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    const auto code = static_cast<uint8_t>(c);
    const float f = e4m3_to_float(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(e4m3_from_float(f), 0x7F);  // NaN encodes as 0x7F whatever its sign
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), e4m3_value(c));
    EXPECT_EQ(std::signbit(f), (c & 0x80) != 0);
    EXPECT_EQ(e4m3_from_float(f), code);
  }
}

TEST(E4m3, RoundsToNearestEvenAtEveryMidpoint) {
  // Positive codes 0x00..0x7E in increasing order; between neighbours a and b the midpoint goes
  // to the even code, anything off it to the nearer one. Negative values mirror.
  for (unsigned c = 0; c < 0x7E; ++c) {
    SCOPED_TRACE(c);
    const float a = e4m3_to_float(static_cast<uint8_t>(c));
    const float b = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (a + b) / 2;  // exact: both are short binary fractions
    const unsigned even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(e4m3_from_float(next_down(mid)), c);
    EXPECT_EQ(e4m3_from_float(mid), even);
    EXPECT_EQ(e4m3_from_float(next_up(mid)), c + 1);
    EXPECT_EQ(e4m3_from_float(-mid), even | 0x80);
  }
}

TEST(E4m3, SaturatesUnderflowsAndHandlesNan) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);  // tie between 448 and (absent) 480 -> even 448
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(kInf), 0x7E);
  EXPECT_EQ(e4m3_from_float(-kInf), 0xFE);
  EXPECT_EQ(e4m3_from_float(kNan), 0x7F);
  EXPECT_EQ(e4m3_from_float(-kNan), 0x7F);
  EXPECT_EQ(e4m3_from_float(0x1p-9f), 0x01);            // smallest subnormal kept
  EXPECT_EQ(e4m3_from_float(0x1p-10f), 0x00);           // exactly half of it: tie to 0
  EXPECT_EQ(e4m3_from_float(next_up(0x1p-10f)), 0x01);  // just above: 2^-9
  EXPECT_EQ(e4m3_from_float(-0x1p-10f), 0x80);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(e4m3_from_float(next_down(0x1p-6f)), 0x08);  // rounds up into the normals
}

TEST(E2m1, DecodesEveryCodeToItsValueAndBack) {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (unsigned c = 0; c < 16; ++c) {
    SCOPED_TRACE(c);
    const float f = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(std::fabs(f), magnitudes[c & 7]);
    EXPECT_EQ(std::signbit(f), (c & 8) != 0);
    EXPECT_EQ(e2m1_from_float(f), c);
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c | 0xA0)), f) << "high nibble is ignored";
  }
}

TEST(E2m1, RoundsAtTheDocumentedBoundaries) {
  // |f| <= 0.25 -> 0, < 0.75 -> 0.5, <= 1.25 -> 1, < 1.75 -> 1.5, <= 2.5 -> 2, < 3.5 -> 3,
  // <= 5 -> 4, otherwise 6.
  struct Edge {
    float at;
    unsigned code_at, code_above;
  };
  const Edge edges[] = {{0.25f, 0, 1}, {0.75f, 2, 2}, {1.25f, 2, 3}, {1.75f, 4, 4},
                        {2.5f, 4, 5},  {3.5f, 6, 6},  {5.0f, 6, 7}};
  unsigned below = 0;
  for (const Edge& e : edges) {
    SCOPED_TRACE(e.at);
    EXPECT_EQ(e2m1_from_float(next_down(e.at)), below);
    EXPECT_EQ(e2m1_from_float(e.at), e.code_at);
    EXPECT_EQ(e2m1_from_float(next_up(e.at)), e.code_above);
    EXPECT_EQ(e2m1_from_float(-e.at), e.code_at | 8);
    below = e.code_above;
  }
}

TEST(E2m1, KeepsTheSignOfZeroSaturatesAndHandlesNan) {
  EXPECT_EQ(e2m1_from_float(0.0f), 0x0);
  EXPECT_EQ(e2m1_from_float(-0.0f), 0x8);
  EXPECT_EQ(e2m1_from_float(-0.1f), 0x8);
  EXPECT_EQ(e2m1_from_float(-std::numeric_limits<float>::denorm_min()), 0x8);
  EXPECT_EQ(e2m1_from_float(7.0f), 0x7);
  EXPECT_EQ(e2m1_from_float(kInf), 0x7);
  EXPECT_EQ(e2m1_from_float(-kInf), 0xF);
  EXPECT_EQ(e2m1_from_float(kNan), 0x7);
  EXPECT_EQ(e2m1_from_float(-kNan), 0x7);
}

}  // namespace
}  // namespace kvq
