// kvq/core/bf16.h: the host conversion programs use to stage bf16 rows.
#include "kvq/core/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kvq {
namespace {

float from_bits(uint32_t bits) {
  float f = 0.0f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (const float f : {0.0f, -0.0f, 1.0f, -2.5f, 448.0f, 1.0f / 64, 3.0e38f}) {
    const float back = bf16_to_float(float_to_bf16(f));
    if (f == 3.0e38f) {
      EXPECT_NEAR(back, f, f / 128);
    } else {
      EXPECT_EQ(back, f);
      EXPECT_EQ(std::signbit(back), std::signbit(f));
    }
  }
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, even below
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, even above
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // below the tie
  // The largest floats round up to infinity, as every RNE conversion does.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Bf16, InfinityAndNaN) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload sits only in the low 16 bits would truncate to infinity: it stays NaN.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace kvq
