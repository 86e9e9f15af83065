#include "kvq/core/slot_mapping.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvq {
namespace {

TensorView slots_view(std::vector<int64_t>& s) {
  return make_view(s.data(), DType::i64, {static_cast<int64_t>(s.size())});
}

TEST(SlotMapping, DistinctSlotsAndRepeatedPaddingHaveNoRepeat) {
  std::vector<int64_t> s{4, -1, 7, 0, -1, -5, 3};
  EXPECT_FALSE(find_repeated_slot(slots_view(s)).has_value());
  std::vector<int64_t> none;
  EXPECT_FALSE(find_repeated_slot(slots_view(none)).has_value());
}

TEST(SlotMapping, TheEarliestRepeatingTokenIsReportedWithTheFirstHolder) {
  // Slot 9 repeats at token 4 (after 0), slot 7 at token 3 (after 1) and again at 5, slot 2 at
  // token 6: token 3 is the first to repeat, though slot 2 sorts first and slot 7's run is longest.
  std::vector<int64_t> s{9, 7, 2, 7, 9, 7, 2};
  const auto r = find_repeated_slot(slots_view(s));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 3);
  EXPECT_EQ(r->first, 1);
  EXPECT_EQ(r->slot, 7);
}

TEST(SlotMapping, I32WithAStrideReadsEveryOtherElement) {
  // [4] i32 with stride 2: 5, 6, 5, 8 (the odd elements repeat each other and are not read).
  std::vector<int32_t> raw{5, 1, 6, 1, 5, 1, 8, 1};
  TensorView v = make_view(raw.data(), DType::i32, {4});
  v.strides[0] = 2;
  EXPECT_EQ(slot_at(v, 2), 5);
  const auto r = find_repeated_slot(v);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 2);
  EXPECT_EQ(r->first, 0);
  EXPECT_EQ(r->slot, 5);
}

}  // namespace
}  // namespace kvq
