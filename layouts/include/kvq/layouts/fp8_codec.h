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

// Round to nearest, ties to even, saturating to +-448 (infinity too); NaN -> 0x7F whatever its
// sign; subnormals kept; |f| <= 2^-10 -> +-0. Equals CUDA's host
// __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3) on all 2^32 inputs (tests/layouts).
KVQ_HD uint8_t e4m3_from_float(float f) {
  const uint32_t bits = detail::float_to_bits(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return 0x7F;                                 // NaN
  if (mag >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448, inf: 448
  uint32_t code;
  if (mag >= 0x3C800000u) {  // >= 2^-6: normal. Round the 23-bit mantissa to 3 bits (RNE) on
    // the whole pattern so a carry moves into the exponent; rebias 127 -> 7.
    const uint32_t rounded = mag + 0x7FFFFu + ((mag >> 20) & 1u);
    code = (rounded >> 20) - (120u << 3);  // at most 0x7E since mag < 448
  } else {  // subnormal in E4M3: round (1.m * 2^(E-127)) * 2^9 to an integer 0..8 (8 = 2^-6)
    const uint32_t exp = mag >> 23;     // biased float exponent, <= 120 here
    const uint32_t shift = 141u - exp;  // value * 2^9 = significand * 2^-shift, shift >= 21
    if (shift >= 25u) {
      code = 0;  // < 2^-10, or exactly 2^-10 (tie to even 0); float subnormals and zero too
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

// Round to nearest, ties to even, saturating to +-57344 (infinity too); NaN -> 0x7F whatever its
// sign; subnormals kept; |f| <= 2^-17 -> +-0. Equals CUDA's host
// __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2) on all 2^32 inputs (tests/layouts).
KVQ_HD uint8_t e5m2_from_float(float f) {
  const uint32_t bits = detail::float_to_bits(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return 0x7F;  // NaN
  // 57344 + half an ulp (61440) and above round past the largest finite value: saturate.
  if (mag >= 0x47700000u) return static_cast<uint8_t>(sign | 0x7Bu);
  uint32_t code;
  if (mag >= 0x38800000u) {  // >= 2^-14: normal. Round the mantissa to 2 bits (RNE) on the whole
    // pattern so a carry moves into the exponent; rebias 127 -> 15.
    const uint32_t rounded = mag + 0xFFFFFu + ((mag >> 21) & 1u);
    code = (rounded >> 21) - (112u << 2);  // at most 0x7B since mag < 61440
  } else {  // subnormal in E5M2: round (1.m * 2^(E-127)) * 2^16 to an integer 0..4 (4 = 2^-14)
    const uint32_t exp = mag >> 23;     // biased float exponent, <= 112 here
    const uint32_t shift = 134u - exp;  // value * 2^16 = significand * 2^-shift, shift >= 22
    if (shift >= 25u) {
      code = 0;  // < 2^-17, or exactly 2^-17 (tie to even 0); float subnormals and zero too
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
