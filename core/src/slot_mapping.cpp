#include "kvq/core/slot_mapping.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvq {

std::optional<RepeatedSlot> find_repeated_slot(const TensorView& slots) {
  const int64_t n = slots.ndim == 1 ? slots.shape[0] : 0;
  std::vector<std::pair<int64_t, int64_t>> used;  // (slot, index) of every non-padding token
  used.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slot_at(slots, i);
    if (slot >= 0) used.emplace_back(slot, i);
  }
  std::sort(used.begin(), used.end());
  // Within a run of one slot the indices ascend, so the smallest repeating index is always the
  // second of its run, and the one before it is the run's first.
  std::optional<RepeatedSlot> earliest;
  for (size_t k = 1; k < used.size(); ++k) {
    if (used[k].first != used[k - 1].first) continue;
    if (!earliest || used[k].second < earliest->index) {
      earliest = RepeatedSlot{used[k].second, used[k - 1].second, used[k].first};
    }
  }
  return earliest;
}

}  // namespace kvq
