#pragma once
// The median of timing samples: one definition for `kvq bench`, the CUDA copy-bandwidth probe and
// the CPU writer benchmark, so their figures mean the same thing. Median rather than mean because
// one preempted launch must not move the number.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvq {

// The middle value of `values`, or the mean of the two middle values for an even count; 0 for an
// empty input (callers time at least one sample, so 0 is never a real answer: treat it as "none").
// Takes a copy because it sorts.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace kvq
