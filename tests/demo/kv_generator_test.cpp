// KvGenerator: deterministic, structured (large key channels, rotary pairs, milder values),
// bf16-exact.
#include "kv_generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvq::demo {
namespace {

constexpr int64_t kH = 4, kD = 64;

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(-2.0f), 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(bf16_from_float(1.00390625f), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to even.
  EXPECT_EQ(bf16_from_float(1.01171875f), 0x3F82);
  EXPECT_EQ(bf16_to_float(0x3FC0), 1.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(NAN))));
}

TEST(KvGenerator, SameSeedSameRowsWhateverTheBatch) {
  KvGenerator g(42, kH, kD);
  std::vector<float> k5(5 * kH * kD), v5(k5.size()), k1(kH * kD), v1(k1.size());
  g.rows(3, 10, 5, k5.data(), v5.data());
  g.rows(3, 12, 1, k1.data(), v1.data());  // token 12 alone
  for (int64_t i = 0; i < kH * kD; ++i) {
    ASSERT_EQ(k1[i], k5[2 * kH * kD + i]);
    ASSERT_EQ(v1[i], v5[2 * kH * kD + i]);
  }
  KvGenerator same(42, kH, kD), other(43, kH, kD);
  std::vector<float> k2(k1.size()), v2(k1.size());
  same.rows(3, 12, 1, k2.data(), v2.data());
  EXPECT_EQ(k1, k2);
  other.rows(3, 12, 1, k2.data(), v2.data());
  EXPECT_NE(k1, k2);
  g.rows(4, 12, 1, k2.data(), v2.data());  // another sequence
  EXPECT_NE(k1, k2);
}

TEST(KvGenerator, ValuesAreBf16Exact) {
  KvGenerator g(1, kH, kD);
  std::vector<float> k(8 * kH * kD), v(k.size()), q(2 * kH * kD);
  g.rows(0, 0, 8, k.data(), v.data());
  g.queries(0, 8, 2, q.data());
  for (float x : k) ASSERT_EQ(x, bf16_to_float(bf16_from_float(x)));
  for (float x : v) ASSERT_EQ(x, bf16_to_float(bf16_from_float(x)));
  for (float x : q) ASSERT_EQ(x, bf16_to_float(bf16_from_float(x)));
}

TEST(KvGenerator, KeysHaveLargeLowFrequencyChannelsValuesDoNot) {
  KvGenerator g(7, kH, kD);
  constexpr int64_t kT = 256;
  std::vector<float> k(kT * kH * kD), v(k.size());
  g.rows(0, 0, kT, k.data(), v.data());
  for (int64_t h = 0; h < kH; ++h) {
    const auto large = g.large_channels(h);
    ASSERT_EQ(large.size(), 2u * KvGenerator::kLargePairsPerHead);
    double large_rms = 0, other_rms = 0, value_max = 0;
    int64_t n_large = 0, n_other = 0;
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t c = 0; c < kD; ++c) {
        const double x = k[(t * kH + h) * kD + c];
        const bool is_large = std::find(large.begin(), large.end(), c) != large.end();
        (is_large ? large_rms : other_rms) += x * x;
        (is_large ? n_large : n_other) += 1;
        value_max = std::max(value_max, std::fabs(static_cast<double>(v[(t * kH + h) * kD + c])));
      }
    }
    large_rms = std::sqrt(large_rms / static_cast<double>(n_large));
    other_rms = std::sqrt(other_rms / static_cast<double>(n_other));
    EXPECT_GT(large_rms, 6.0 * other_rms) << "head " << h;
    EXPECT_LT(value_max, 7.0) << "values stay mild";
    // Large pairs are low-frequency: channel i and i + D/2 with i >= D/4.
    for (int64_t c : large) EXPECT_GE(c % (kD / 2), kD / 4);
  }
}

TEST(KvGenerator, KeysAreRotaryEncoded) {
  // The norm of a rotary pair does not depend on the angle: with the same noise, |(x, y)| at
  // two positions differs only by the noise drawn for each position, but the large pairs' norms
  // stay near the large magnitude * sqrt(2) whatever the position.
  KvGenerator g(9, 1, kD);
  const auto large = g.large_channels(0);
  const int64_t i = large.front();  // the lower channel of a large pair
  ASSERT_LT(i, kD / 2);
  for (int64_t pos : {0, 100, 5000, 123456}) {
    std::vector<float> k(kD), v(kD);
    g.rows(0, pos, 1, k.data(), v.data());
    const double norm = std::hypot(k[i], k[i + kD / 2]);
    EXPECT_NEAR(norm, KvGenerator::kLargeMagnitude * std::sqrt(2.0), 4.5) << "position " << pos;
  }
}

TEST(KvGenerator, RefusesOddHeadSize) {
  EXPECT_THROW(KvGenerator(1, 1, 7), std::exception);
  EXPECT_THROW(KvGenerator(1, 0, 8), std::exception);
}

}  // namespace
}  // namespace kvq::demo
