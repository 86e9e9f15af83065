#pragma once
// --timeline: collects every write's per-shard timestamps (ShardWriteTimes) and sums them up into
// a TimelineResult: how often every shard's write was in flight at once, and the largest writes'
// timestamps to show it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "report.h"
#include "sharded_cache.h"

namespace kvq::demo {

class TimelineRecorder {
 public:
  // Timestamps are reported in microseconds since `epoch`; result() keeps the `largest` writes
  // with the most rows (the earliest among equals).
  explicit TimelineRecorder(std::chrono::steady_clock::time_point epoch, std::size_t largest = 6)
      : epoch_(epoch), largest_(largest) {}

  // One write of `tokens` rows (padding included), one entry per shard, in shard order.
  void add(int64_t tokens, bool prefill, const std::vector<ShardWriteTimes>& times);

  TimelineResult result() const;

 private:
  std::chrono::steady_clock::time_point epoch_;
  std::size_t largest_;
  std::vector<TimelineWrite> writes_;
};

}  // namespace kvq::demo
