#pragma once
// Why a scale arrangement cannot hold a geometry: the CacheSpec field at fault ("block_size",
// "head_size") and the rule, or {} when it can.
namespace kvq {

struct ArrangementRefusal {
  const char* field = nullptr;  // nullptr: accepted
  const char* rule = nullptr;   // the condition that must hold: "block_size % 4 == 0 (...)"
  constexpr explicit operator bool() const { return field != nullptr; }
};

}  // namespace kvq
