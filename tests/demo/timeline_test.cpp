// TimelineRecorder (unit): the summary of per-shard write timestamps, from made-up times.
#include "timeline.h"

#include <gtest/gtest.h>

namespace kvq::demo {
namespace {

using Clock = std::chrono::steady_clock;

ShardWriteTimes at(Clock::time_point epoch, int start, int issued, int end) {
  return {epoch + std::chrono::microseconds(start), epoch + std::chrono::microseconds(issued),
          epoch + std::chrono::microseconds(end)};
}

TEST(Timeline, SumsOverlapAndKeepsTheLargestWritesInOrder) {
  const Clock::time_point epoch = Clock::now();
  TimelineRecorder rec(epoch, 2);
  // A GPU-like write: both queued within 10 us, both running until 100 / 110.
  rec.add(64, true, {at(epoch, 0, 5, 100), at(epoch, 5, 10, 110)});
  // A CPU-like write: shard 0's work is inside write(); nothing overlaps.
  rec.add(8, false, {at(epoch, 200, 300, 401), at(epoch, 300, 400, 401)});
  // The largest, last.
  rec.add(128, true, {at(epoch, 500, 502, 600), at(epoch, 502, 504, 650)});
  const TimelineResult r = rec.result();
  EXPECT_EQ(r.writes, 3);
  // first end - last issued: (100 - 10) + (401 - 400) + (600 - 504) us.
  EXPECT_NEAR(r.overlap_s, (90 + 1 + 96) * 1e-6, 1e-9);
  // last end - first start: 110 + 201 + 150 us.
  EXPECT_NEAR(r.write_s, (110 + 201 + 150) * 1e-6, 1e-9);
  ASSERT_EQ(r.shard_busy_s.size(), 2u);
  EXPECT_NEAR(r.shard_busy_s[0], (100 + 201 + 100) * 1e-6, 1e-9);
  EXPECT_NEAR(r.shard_busy_s[1], (105 + 101 + 148) * 1e-6, 1e-9);
  EXPECT_NEAR(r.shard_issue_s[0], (5 + 100 + 2) * 1e-6, 1e-9);
  EXPECT_NEAR(r.shard_issue_s[1], (5 + 100 + 2) * 1e-6, 1e-9);
  ASSERT_EQ(r.largest.size(), 2u);
  EXPECT_EQ(r.largest[0].index, 0);  // written first, so listed first
  EXPECT_EQ(r.largest[0].tokens, 64);
  EXPECT_TRUE(r.largest[0].prefill);
  EXPECT_EQ(r.largest[1].index, 2);
  ASSERT_EQ(r.largest[1].shards.size(), 2u);
  EXPECT_NEAR(r.largest[1].shards[1].start_us, 502, 1e-6);
  EXPECT_NEAR(r.largest[1].shards[1].issued_us, 504, 1e-6);
  EXPECT_NEAR(r.largest[1].shards[1].end_us, 650, 1e-6);
}

TEST(Timeline, OneShardHasNothingToOverlap) {
  const Clock::time_point epoch = Clock::now();
  TimelineRecorder rec(epoch);
  rec.add(8, false, {at(epoch, 0, 5, 100)});
  const TimelineResult r = rec.result();
  EXPECT_EQ(r.overlap_s, 0.0);
  EXPECT_NEAR(r.write_s, 100e-6, 1e-12);
  EXPECT_EQ(r.largest.size(), 1u);
}

}  // namespace
}  // namespace kvq::demo
