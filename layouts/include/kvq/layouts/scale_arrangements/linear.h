#pragma once
// `linear`: scale (t, s) stays at (t, s) of the head's [T, S] tile -- row t holds the S scales of
// token t in group order. What SM100 trtllm-gen reads for K, and what SM120 readers and
// FlashInfer's generic path read for both sides.
#include <cstdint>

#include "kvq/layouts/hd.h"
#include "kvq/layouts/layout_enums.h"
#include "kvq/layouts/scale_arrangements/refusal.h"

namespace kvq {

struct LinearScales {
  static constexpr ScaleArrangement id = ScaleArrangement::linear;
  static constexpr const char* name = "linear";

  // Position (t', s') in the [T, S] tile of scale (t, s).
  KVQ_HD static void place(int64_t t, int64_t s, int64_t /*S*/, int64_t& tp, int64_t& sp) {
    tp = t;
    sp = s;
  }

  // Any block_size and any group count.
  static constexpr ArrangementRefusal check(int64_t /*block_size*/, int64_t /*groups*/) {
    return {};
  }
};

}  // namespace kvq
