#pragma once
// The two small float formats of NVFP4 (docs/format.md), written with integer
// and bit arithmetic only (no double, no tables) so that the CUDA kernels run the very same code.
//
// E4M3 (float8 e4m3fn, the per-group scale):  s eeee mmm, bias 7, no infinity, 0x7F/0xFF = NaN.
//   normal    (e > 0): 2^(e-7) * (1 + m/8)    largest 0x7E = 448
//   subnormal (e = 0): 2^-9 * m               smallest 0x01 = 2^-9
// E2M1 (fp4, the data):  s ee m in the low nibble, bias 1, magnitudes of codes 0..7:
//   0, 0.5, 1, 1.5, 2, 3, 4, 6
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

namespace detail {
// 1 when m > bound, else 0, for m, bound < 2^31; branch-free.
KVQ_HD uint32_t above(uint32_t m, uint32_t bound) {
  return (bound - m) >> 31;
}
}  // namespace detail

// Round to nearest, ties to even code, saturating to +-6 (infinity too); the sign is kept, also
// on zero (-0.0, -0.1 -> 0x8); NaN -> 0x7 whatever its sign. Equals CUDA's host
// __nv_cvt_float_to_fp4(f, __NV_E2M1, cudaRoundNearest) on all 2^32 inputs (tests/layouts).
// The 4-bit code is in the low nibble.
KVQ_HD uint8_t e2m1_from_float(float f) {
  const uint32_t bits = detail::float_to_bits(f);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return 0x7;  // NaN
  // Count the rounding boundaries at or below |f|: ties at 0.25, 1.25, 2.5, 5 go down (to the
  // even code), ties at 0.75, 1.75, 3.5 go up. Patterns of non-negative floats order like ints,
  // and below 2^31 `(bound - mag) >> 31` is 1 exactly when mag > bound: a sum of subtractions
  // and shifts, which no compiler turns into data-dependent branches (a sum of comparisons can
  // become a chain of mispredicted jumps on the host).
  using detail::above;
  const uint32_t code = above(mag, 0x3E800000u)         // > 0.25
                        + above(mag, 0x3F400000u - 1u)  // >= 0.75
                        + above(mag, 0x3FA00000u)       // > 1.25
                        + above(mag, 0x3FE00000u - 1u)  // >= 1.75
                        + above(mag, 0x40200000u)       // > 2.5
                        + above(mag, 0x40600000u - 1u)  // >= 3.5
                        + above(mag, 0x40A00000u);      // > 5
  return static_cast<uint8_t>(((bits >> 28) & 0x8u) | code);
}

// Decodes the low nibble (the high nibble is ignored).
KVQ_HD float e2m1_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x8u) << 28;
  const uint32_t exp = (code >> 1) & 0x3u;
  const uint32_t man = code & 0x1u;
  // exp 0: 0 or 0.5 (0x3F000000); else 2^(exp-1) * (1 + man/2)
  const uint32_t mag = exp == 0 ? man * 0x3F000000u : ((exp + 126u) << 23) | (man << 22);
  return detail::bits_to_float(sign | mag);
}

}  // namespace kvq
