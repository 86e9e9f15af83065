#pragma once
// Host-side reading of a slot mapping ([num_tokens] i64 | i32, any non-negative stride): one
// definition for the CPU reference's checks and for the apps, which hold the slots on the host
// even when the writer's are on a device (where a repeated slot cannot be caught without a sync).
#include <cstdint>
#include <optional>

#include "kvq/core/export.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

// slots[i] as int64. The caller has checked: host memory, 1-D, i64 or i32, i < shape[0].
inline int64_t slot_at(const TensorView& slots, int64_t i) {
  const auto* base = static_cast<const uint8_t*>(slots.data);
  const int64_t offset = i * slots.strides[0];
  if (slots.dtype == DType::i64) return reinterpret_cast<const int64_t*>(base)[offset];
  return reinterpret_cast<const int32_t*>(base)[offset];
}

// slots[index] == slots[first] == slot with first < index, for the smallest such index (the
// first token to repeat a slot an earlier token named). Padding (< 0) never repeats.
struct RepeatedSlot {
  int64_t index = 0;
  int64_t first = 0;
  int64_t slot = 0;
};

// The repeat a write would race on, if any. O(T log T); same preconditions as slot_at.
KVQ_API std::optional<RepeatedSlot> find_repeated_slot(const TensorView& slots);

}  // namespace kvq
