// GQA decode attention and the error statistics the demo reports.
#include "attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvq::demo {
namespace {

TEST(Attention, OneTokenReturnsItsValue) {
  // T = 1: softmax is 1 whatever the query.
  const std::vector<float> q = {3, -1, 2, 5};  // 2 query heads x D 2, group 2, H 1
  const std::vector<float> k = {0.5f, 0.25f};
  const std::vector<float> v = {7, -8};
  std::vector<float> out(4);
  gqa_decode_attention({1, 1, 2, 2}, q.data(), k.data(), v.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{7, -8, 7, -8}));
}

TEST(Attention, HandComputedSoftmaxAndGrouping) {
  // H = 2 KV heads, D = 2, group 2: query heads 0, 1 read KV head 0; 2, 3 read KV head 1.
  // T = 2 tokens. k/v [T, H, D].
  const std::vector<float> k = {1, 0, /*h1*/ 0, 0, /*t1*/ 0, 1, /*h1*/ 0, 0};
  const std::vector<float> v = {1, 2, /*h1*/ 10, 20, /*t1*/ 3, 4, /*h1*/ 30, 40};
  const float s = std::sqrt(2.0f);  // q . k / sqrt(2) = 1 when q has sqrt(2) on the channel
  const std::vector<float> q = {s, 0, 0, s, 5, 5, -5, 0};
  std::vector<float> out(8);
  gqa_decode_attention({2, 2, 2, 2}, q.data(), k.data(), v.data(), out.data());
  const double e = std::exp(1.0);
  const double p0 = e / (e + 1);  // head 0 query: logits (1, 0)
  EXPECT_NEAR(out[0], p0 * 1 + (1 - p0) * 3, 1e-6);
  EXPECT_NEAR(out[1], p0 * 2 + (1 - p0) * 4, 1e-6);
  EXPECT_NEAR(out[2], (1 - p0) * 1 + p0 * 3, 1e-6);  // logits (0, 1)
  EXPECT_NEAR(out[3], (1 - p0) * 2 + p0 * 4, 1e-6);
  // KV head 1's keys are zero: uniform weights.
  EXPECT_NEAR(out[4], 20, 1e-6);
  EXPECT_NEAR(out[5], 30, 1e-6);
  EXPECT_NEAR(out[6], 20, 1e-6);
  EXPECT_NEAR(out[7], 30, 1e-6);
}

TEST(Attention, LargeLogitsDoNotOverflow) {
  const std::vector<float> k = {1000, -1000};  // T 2, H 1, D 1
  const std::vector<float> v = {1, 2};
  const std::vector<float> q = {100};
  std::vector<float> out(1);
  gqa_decode_attention({2, 1, 1, 1}, q.data(), k.data(), v.data(), out.data());
  EXPECT_EQ(out[0], 1.0f);
}

TEST(ErrorStats, RelativeL2AndCosine) {
  ErrorStats st;
  const std::vector<float> ref = {3, 4};
  const std::vector<float> test = {3, 5};
  st.add(ref.data(), test.data(), 2);
  EXPECT_DOUBLE_EQ(st.rel_l2(), 1.0 / 5.0);
  EXPECT_NEAR(st.cosine(), (9.0 + 20.0) / (5.0 * std::sqrt(34.0)), 1e-12);
  // Accumulates across calls as one long vector.
  const std::vector<float> ref2 = {0, 0};
  const std::vector<float> test2 = {0, 3};
  st.add(ref2.data(), test2.data(), 2);
  EXPECT_DOUBLE_EQ(st.rel_l2(), std::sqrt(10.0) / 5.0);
  EXPECT_EQ(st.count(), 4);
  ErrorStats zero;
  EXPECT_EQ(zero.rel_l2(), 0.0);
  EXPECT_EQ(zero.cosine(), 1.0);
}

// A test vector of zeros against a non-zero reference (a side read back as zeros) has no
// direction: cosine 0, not the 0/0 NaN of the formula; likewise the other way round.
TEST(ErrorStats, CosineOfAZeroVectorAgainstANonZeroOneIsZero) {
  const std::vector<float> ref = {3, -4};
  const std::vector<float> zeros = {0, 0};
  ErrorStats test_zero;
  test_zero.add(ref.data(), zeros.data(), 2);
  EXPECT_EQ(test_zero.cosine(), 0.0);
  EXPECT_EQ(test_zero.rel_l2(), 1.0);
  ErrorStats ref_zero;
  ref_zero.add(zeros.data(), ref.data(), 2);
  EXPECT_EQ(ref_zero.cosine(), 0.0);
}

}  // namespace
}  // namespace kvq::demo
