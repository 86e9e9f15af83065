#pragma once
// The two small float formats of NVFP4 (docs/format.md), written with integer
// and bit arithmetic only (no double, no tables) so that the CUDA kernels run the very same code.
// E4M3, the per-group scale, is kvq/layouts/fp8_codec.h's.
//
// E2M1 (fp4, the data):  s ee m in the low nibble, bias 1, magnitudes of codes 0..7:
//   0, 0.5, 1, 1.5, 2, 3, 4, 6
#include <cstdint>

#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/fp8_codec.h"
#include "kvq/layouts/hd.h"

namespace kvq {

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
