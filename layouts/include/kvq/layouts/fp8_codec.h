#pragma once
// The 8-bit float formats (docs/format.md), written with integer and bit arithmetic only (no
// double, no tables) so that host code and the CUDA kernels run the very same code. E4M3 is also
// NVFP4's per-group scale.
//
// E4M3 (float8 e4m3fn):  s eeee mmm, bias 7, no infinity, 0x7F/0xFF = NaN.
//   normal    (e > 0): 2^(e-7) * (1 + m/8)         largest 0x7E = 448
//   subnormal (e = 0): 2^-9 * m                     smallest 0x01 = 2^-9
// E5M2 (float8 e5m2):    s eeeee mm, bias 15, 0x7C = infinity, 0x7D..0x7F = NaN.
//   normal    (e > 0): 2^(e-15) * (1 + m/4)         largest 0x7B = 57344
//   subnormal (e = 0): 2^-16 * m                    smallest 0x01 = 2^-16
// Encoding saturates (__NV_SATFINITE): an infinity or a value past the largest finite one becomes
// the largest finite value of its sign; NaN becomes 0x7F whatever its sign; -0 keeps its sign.
#include <cstdint>

#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/hd.h"

namespace kvq {

namespace detail {

// An 8-bit float s e..e m..m with `Man` mantissa bits and exponent bias `Bias` from f: round to
// nearest, ties to even; |f| at or past the rounding point above the largest finite value
// (`SatBits`, a float pattern) and infinity saturate to `MaxCode`; NaN -> 0x7F whatever its
// sign; subnormals kept; -0 keeps its sign. The two fp8 formats differ only in these numbers.
template <uint32_t Man, uint32_t Bias, uint32_t SatBits, uint32_t MaxCode>
KVQ_HD uint8_t fp8_from_float(float f) {
  constexpr uint32_t kDrop = 23u - Man;                    // float mantissa bits rounded off
  constexpr uint32_t kMinNormal = (128u - Bias) << 23;     // 2^(1 - Bias)
  constexpr uint32_t kSubnormalShift = 151u - Bias - Man;  // see below
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return 0x7F;                               // NaN
  if (mag >= SatBits) return static_cast<uint8_t>(sign | MaxCode);  // saturate (infinity too)
  uint32_t code;
  if (mag >= kMinNormal) {  // normal: round the mantissa (RNE) on the whole pattern so a carry
    // moves into the exponent; rebias 127 -> Bias. At most MaxCode since mag < SatBits.
    const uint32_t rounded = mag + ((1u << (kDrop - 1u)) - 1u) + ((mag >> kDrop) & 1u);
    code = (rounded >> kDrop) - ((127u - Bias) << Man);
  } else {  // subnormal: round value * 2^(Bias - 1 + Man) to an integer (2^Man = the smallest
    // normal); value = significand * 2^(exp - 150), so the shift is kSubnormalShift - exp.
    const uint32_t exp = mag >> 23;  // biased float exponent
    const uint32_t shift = kSubnormalShift - exp;
    if (shift >= 25u) {
      code = 0;  // below half the smallest subnormal, or exactly half (tie to even 0)
    } else {
      const uint32_t sig = (mag & 0x7FFFFFu) | 0x800000u;
      const uint32_t half = 1u << (shift - 1u);
      const uint32_t rest = sig & ((half << 1) - 1u);
      code = sig >> shift;
      code += (rest > half || (rest == half && (code & 1u))) ? 1u : 0u;
    }
  }
  return static_cast<uint8_t>(sign | code);
}

}  // namespace detail

// Saturating to +-448 (448 and above, infinity too); |f| <= 2^-10 -> +-0. Equals CUDA's host
// __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3) on all 2^32 inputs (tests/layouts).
KVQ_HD uint8_t e4m3_from_float(float f) {
  return detail::fp8_from_float<3u, 7u, 0x43E00000u, 0x7Eu>(f);
}

KVQ_HD float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xFu;
  const uint32_t man = code & 0x7u;
  if (exp == 0xFu && man == 0x7u) return detail::bits_to_float(sign | 0x7FC00000u);  // NaN
  if (exp == 0) {  // m * 2^-9, exact in float
    const float mag = static_cast<float>(man) * 0.001953125f;
    return detail::bits_to_float(sign | detail::float_to_bits(mag));
  }
  return detail::bits_to_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// Saturating to +-57344 (61440 = 57344 + half an ulp and above, infinity too); |f| <= 2^-17
// -> +-0. Equals CUDA's host __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2) on all 2^32
// inputs (tests/layouts).
KVQ_HD uint8_t e5m2_from_float(float f) {
  return detail::fp8_from_float<2u, 15u, 0x47700000u, 0x7Bu>(f);
}

KVQ_HD float e5m2_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 2) & 0x1Fu;
  const uint32_t man = code & 0x3u;
  if (exp == 0x1Fu) return detail::bits_to_float(sign | (man == 0 ? 0x7F800000u : 0x7FC00000u));
  if (exp == 0) {  // m * 2^-16, exact in float
    const float mag = static_cast<float>(man) * 1.52587890625e-05f;
    return detail::bits_to_float(sign | detail::float_to_bits(mag));
  }
  return detail::bits_to_float(sign | ((exp + 112u) << 23) | (man << 21));
}

}  // namespace kvq
