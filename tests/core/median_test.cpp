#include "kvq/core/median.h"

#include <gtest/gtest.h>

namespace kvq {
namespace {

TEST(Median, OddCountIsTheMiddleValue) {
  EXPECT_DOUBLE_EQ(median({1.0, 2.0, 3.0}), 2.0);
}

TEST(Median, EvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(median({1.0, 2.0, 3.0, 10.0}), 2.5);
}

TEST(Median, UnsortedInputIsSortedFirst) {
  EXPECT_DOUBLE_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(Median, SingleElementIsItself) {
  EXPECT_DOUBLE_EQ(median({7.5}), 7.5);
}

TEST(Median, EmptyIsZero) {
  EXPECT_DOUBLE_EQ(median({}), 0.0);
}

}  // namespace
}  // namespace kvq
