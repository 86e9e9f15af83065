#pragma once
// `sm100_swizzled`: trtllm-gen's 4-token interleave, what SM100 reads for V.
// Each block of 4 tokens x S groups of a head's [T, S] tile is stored transposed, so the 4
// tokens' scales of one group form one 32-bit word:
//
//   S = 8, tokens 0..3 (HND tile offsets):    t=0 t=1 t=2 t=3
//                                        s=0    0   1   2   3    <- one 32-bit word
//                                        s=1    4   5   6   7
//                                        ...
//                                        s=7   28  29  30  31
//
// As a (t, s) -> (t', s') map with g = S/4:  t' = (t/4)*4 + s/g,  s' = (s%g)*4 + t%4,
// i.e. tile offset t'*S + s' = (t/4)*4*S + 4*s + t%4.
// Needs T % 4 == 0 (whole 4-token blocks) and S % 4 == 0 (head_size % 64 == 0; vLLM does not
// check this and writes out of bounds for head_size 80, divides by zero for 16 and 32).
#include <cstdint>

#include "kvq/layouts/hd.h"
#include "kvq/layouts/layout_enums.h"
#include "kvq/layouts/scale_arrangements/refusal.h"

namespace kvq {

struct Sm100SwizzledScales {
  static constexpr ScaleArrangement id = ScaleArrangement::sm100_swizzled;
  static constexpr const char* name = "sm100_swizzled";

  KVQ_HD static void place(int64_t t, int64_t s, int64_t S, int64_t& tp, int64_t& sp) {
    const int64_t g = S / 4;
    tp = (t / 4) * 4 + s / g;
    sp = (s % g) * 4 + t % 4;
  }

  static constexpr ArrangementRefusal check(int64_t block_size, int64_t groups) {
    if (block_size % 4 != 0) {
      return {"block_size", "block_size % 4 == 0 (whole 4-token blocks)"};
    }
    if (groups % 4 != 0) {
      return {"head_size", "head_size % 64 == 0 (groups = head_size/16 a multiple of 4)"};
    }
    return {};
  }
};

}  // namespace kvq
