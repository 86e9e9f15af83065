#pragma once
// Every scale arrangement, in one list. Adding one: write scale_arrangements/<name>.h (id, name,
// place(), check()), give it an enum value in layout_enums.h, and add it to the list below. The
// device dispatch, the name lookup and the validation all follow from the list.
#include <cstdint>
#include <string_view>

#include "kvq/layouts/hd.h"
#include "kvq/layouts/scale_arrangements/linear.h"
#include "kvq/layouts/scale_arrangements/sm100_swizzled.h"

namespace kvq {

template <class... A>
struct ScaleArrangementList {
  static constexpr int size = sizeof...(A);

  // (t, s) -> (t', s') by arrangement `a`; an id not in the list (host validation refuses it)
  // leaves (t, s) unchanged.
  KVQ_HD static void place(ScaleArrangement a, int64_t t, int64_t s, int64_t S, int64_t& tp,
                           int64_t& sp) {
    tp = t;
    sp = s;
    (void)((a == A::id ? (A::place(t, s, S, tp, sp), true) : false) || ...);
  }

  // Host-side lookups.
  static constexpr const char* names[] = {A::name...};
  static constexpr bool find(std::string_view word, ScaleArrangement& out) {
    return ((word == A::name ? (out = A::id, true) : false) || ...);
  }
  static constexpr const char* name_of(ScaleArrangement a) {
    const char* n = "?";
    (void)((a == A::id ? (n = A::name, true) : false) || ...);
    return n;
  }
  static constexpr ArrangementRefusal check(ScaleArrangement a, int64_t block_size,
                                            int64_t groups) {
    ArrangementRefusal r{};
    (void)((a == A::id ? (r = A::check(block_size, groups), true) : false) || ...);
    return r;
  }
};

using ScaleArrangements = ScaleArrangementList<LinearScales, Sm100SwizzledScales>;

}  // namespace kvq
