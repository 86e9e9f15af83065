#include "bench_stats.h"

#include <algorithm>

#include "kvq/core/median.h"
#include "kvq/core/status.h"

namespace kvq::app::bench {

TimingSummary summarize(std::vector<double> samples_ms) {
  if (samples_ms.empty()) throw Error(ErrorCode::internal, "bench: a timing returned no samples");
  TimingSummary s;
  s.iterations = static_cast<int32_t>(samples_ms.size());
  s.median_ms = median(samples_ms);
  const auto [lo, hi] = std::minmax_element(samples_ms.begin(), samples_ms.end());
  s.min_ms = *lo;
  s.max_ms = *hi;
  s.samples_ms = std::move(samples_ms);
  return s;
}

ByteCounts write_bytes(int64_t tokens, int64_t valid_tokens, int64_t num_kv_heads,
                       int64_t head_size, const RowBytes& row) {
  const auto rows = static_cast<uint64_t>(2 * valid_tokens * num_kv_heads);  // K and V
  ByteCounts b;
  b.read = rows * static_cast<uint64_t>(head_size * row.input_element_bytes) +
           static_cast<uint64_t>(tokens * row.slot_bytes);
  b.written = rows * static_cast<uint64_t>(row.packed_row_bytes);
  return b;
}

ByteCounts read_bytes(int64_t tokens, int64_t valid_tokens, int64_t num_kv_heads, int64_t head_size,
                      const RowBytes& row) {
  const auto valid_rows = static_cast<uint64_t>(2 * valid_tokens * num_kv_heads);
  const auto all_rows = static_cast<uint64_t>(2 * tokens * num_kv_heads);
  ByteCounts b;
  b.read = valid_rows * static_cast<uint64_t>(row.packed_row_bytes) +
           static_cast<uint64_t>(tokens * row.slot_bytes);
  b.written = all_rows * static_cast<uint64_t>(head_size * row.output_element_bytes);
  return b;
}

double gigabytes_per_second(uint64_t bytes, double milliseconds) {
  if (milliseconds <= 0) return 0;
  return static_cast<double>(bytes) / (milliseconds * 1e-3) / 1e9;
}

}  // namespace kvq::app::bench
