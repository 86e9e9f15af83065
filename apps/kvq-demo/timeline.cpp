#include "timeline.h"

#include <algorithm>

namespace kvq::demo {

void TimelineRecorder::add(int64_t tokens, bool prefill,
                           const std::vector<ShardWriteTimes>& times) {
  auto us = [this](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - epoch_).count();
  };
  TimelineWrite w;
  w.index = static_cast<int64_t>(writes_.size());
  w.tokens = tokens;
  w.prefill = prefill;
  for (const ShardWriteTimes& t : times) w.shards.push_back({us(t.start), us(t.issued), us(t.end)});
  writes_.push_back(std::move(w));
}

TimelineResult TimelineRecorder::result() const {
  TimelineResult r;
  r.writes = static_cast<int64_t>(writes_.size());
  const std::size_t shards = writes_.empty() ? 0 : writes_.front().shards.size();
  r.shard_busy_s.assign(shards, 0.0);
  r.shard_issue_s.assign(shards, 0.0);
  for (const TimelineWrite& w : writes_) {
    double first_start = w.shards.front().start_us, last_end = w.shards.front().end_us;
    double last_issued = w.shards.front().issued_us, first_end = w.shards.front().end_us;
    for (std::size_t i = 0; i < w.shards.size(); ++i) {
      const TimelineShard& s = w.shards[i];
      first_start = std::min(first_start, s.start_us);
      last_end = std::max(last_end, s.end_us);
      last_issued = std::max(last_issued, s.issued_us);
      first_end = std::min(first_end, s.end_us);
      r.shard_busy_s[i] += (s.end_us - s.start_us) * 1e-6;
      r.shard_issue_s[i] += (s.issued_us - s.start_us) * 1e-6;
    }
    r.write_s += (last_end - first_start) * 1e-6;
    if (w.shards.size() > 1 && first_end > last_issued) {
      r.overlap_s += (first_end - last_issued) * 1e-6;
    }
  }
  std::vector<const TimelineWrite*> order;
  for (const TimelineWrite& w : writes_) order.push_back(&w);
  const std::size_t keep = std::min(largest_, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [](const TimelineWrite* a, const TimelineWrite* b) {
                      return a->tokens != b->tokens ? a->tokens > b->tokens : a->index < b->index;
                    });
  order.resize(keep);
  std::sort(order.begin(), order.end(),
            [](const TimelineWrite* a, const TimelineWrite* b) { return a->index < b->index; });
  for (const TimelineWrite* w : order) r.largest.push_back(*w);
  return r;
}

}  // namespace kvq::demo
