#pragma once
// bf16 <-> float on the host, for programs that stage their own K/V rows: bf16 is the upper half
// of a float32's bits. float_to_bf16 rounds to nearest, ties to even (as PyTorch's .bfloat16()
// and CUDA's __float2bfloat16 do); a NaN stays a (quiet) NaN. Header-only, no link needed.
#include <cstdint>
#include <cstring>

namespace kvq {

inline uint16_t float_to_bf16(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep it one, quiet
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f = 0.0f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace kvq
