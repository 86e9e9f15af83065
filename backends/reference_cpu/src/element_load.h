#pragma once
// Input elements to float32. bf16 and fp16 convert exactly (every value, subnormals, infinities
// and NaN payloads), as the format requires before step 1.
#include <bit>
#include <cstdint>
#include <cstring>

#include "kvq/core/dtype.h"

namespace kvq::reference_cpu {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float32 (11 significant bits at most).
  const float magnitude = static_cast<float>(mantissa) * bits_to_float(0x33800000u);  // 2^-24
  return bits_to_float(sign | (std::bit_cast<uint32_t>(magnitude)));
}

// The element `index` elements past `base` (strides already applied by the caller).
template <DType T>
inline float load_element(const uint8_t* base, int64_t index) {
  if constexpr (T == DType::f32) {
    float f;
    std::memcpy(&f, base + index * 4, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, base + index * 2, 2);
    if constexpr (T == DType::bf16) {
      return bf16_to_float(h);
    } else {
      return f16_to_float(h);
    }
  }
}

}  // namespace kvq::reference_cpu
