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

TEST(Status, ConfigKeyCrossesAsStatusAndBack) {
  // What a plugin's noexcept entry does with a layout error, and what the host rethrows.
  Status s = catch_as_status([] {
    throw Error(ErrorCode::invalid_argument, "head_size 80: expected a multiple of 64",
                "cache.head_size");
  });
  EXPECT_EQ(s.key(), "cache.head_size");
  try {
    throw_if_error(s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "cache.head_size");
    EXPECT_STREQ(e.what(), "head_size 80: expected a multiple of 64");
  }
  EXPECT_EQ(Status(ErrorCode::io, "x").key(), "");
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
// Text from files and users in messages: control bytes escaped, cut at a character boundary.
TEST(MessageText, EscapesControlBytesAndCutsAtACharacter) {
  EXPECT_EQ(message_text("key"), "key");
  EXPECT_EQ(message_text("a\nb\tc\rd\x01\x7f"), "a\\nb\\tc\\rd\\x01\\x7f");
  EXPECT_EQ(message_text(std::string(65, 'x')), std::string(64, 'x') + "...");
  EXPECT_EQ(message_text(std::string(64, 'x')), std::string(64, 'x'));
  // "\xc3\xa9" is one character: a cut at byte 3 would split it, so it comes at byte 2.
  EXPECT_EQ(message_text("ab\xc3\xa9"
                         "cd",
                         3),
            "ab...");
  EXPECT_EQ(message_text("ab\xc3\xa9"
                         "cd",
                         4),
            "ab\xc3\xa9...");
}

}  // namespace kvq
