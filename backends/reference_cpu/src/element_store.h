#pragma once
// float32 to an output element (bf16, f16 or f32), rounded to nearest, ties to even: what the
// reference attention stores.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvq/core/bf16.h"
#include "kvq/core/dtype.h"

namespace kvq::reference_cpu {

inline uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal f16, a multiple of 2^-24
    const float a = std::fabs(f) * 16777216.0f;  // exact: a power-of-two scaling
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a)));
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even, rebias the exponent (127 -> 15).
  const uint32_t rounded = abs + 0x0FFFu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

// Stores `value` as element `index` of a `T` array at `base`.
inline void store_element(DType t, void* base, int64_t index, float value) {
  if (t == DType::f32) {
    static_cast<float*>(base)[index] = value;
  } else if (t == DType::bf16) {
    static_cast<uint16_t*>(base)[index] = float_to_bf16(value);
  } else {
    static_cast<uint16_t*>(base)[index] = float_to_f16(value);
  }
}

}  // namespace kvq::reference_cpu
