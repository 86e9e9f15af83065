#include "kvq/core/status.h"

#include <gtest/gtest.h>

namespace kvq {
namespace {

TEST(Status, CatchAsStatusKeepsCodeAndMessage) {
  Status s = catch_as_status([] { throw Error(ErrorCode::out_of_range, "slot 9 >= 8"); });
  EXPECT_EQ(s.code(), ErrorCode::out_of_range);
  EXPECT_EQ(s.message(), "slot 9 >= 8");
  EXPECT_TRUE(catch_as_status([] {}).is_ok());
  Status other = catch_as_status([] { throw std::runtime_error("boom"); });
  EXPECT_EQ(other.code(), ErrorCode::internal);
  EXPECT_EQ(other.message(), "boom");
}

TEST(Status, ThrowIfErrorRoundTrips) {
  EXPECT_NO_THROW(throw_if_error(Status::ok()));
  try {
    throw_if_error({ErrorCode::unavailable, "no CUDA device"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_STREQ(e.what(), "no CUDA device");
  }
}

}  // namespace
}  // namespace kvq
