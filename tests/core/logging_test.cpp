#include "kvq/core/logging.h"

#include <gtest/gtest.h>

#include "kvq/core/status.h"

namespace kvq {
namespace {

// The six words docs/config.md lists, in that order, and no alias spdlog would also take.
TEST(Logging, LevelWordsAreTheDocumentedSix) {
  EXPECT_EQ(log_level_words(), "trace, debug, info, warn, error or off");
  for (const char* w : {"trace", "debug", "info", "warn", "error", "off"}) {
    EXPECT_TRUE(is_log_level(w)) << w;
  }
  for (const char* w : {"warning", "err", "critical", "INFO", ""}) {
    EXPECT_FALSE(is_log_level(w)) << w;
  }
}

TEST(Logging, UnknownLevelThrowsAndKeepsTheLevel) {
  const auto before = logger().level();
  try {
    set_log_level("loud");
    FAIL() << "set_log_level accepted 'loud'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_STREQ(e.what(),
                 "unknown log level 'loud': expected trace, debug, info, warn, error or off");
  }
  EXPECT_EQ(logger().level(), before);
}

}  // namespace
}  // namespace kvq
