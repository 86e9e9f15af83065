#pragma once
// E2M1 encoders for the write kernel: 8 floats -> 8 nibbles in one 32-bit word (element i in bits
// [4i, 4i+4), i.e. byte k = q[2k] | q[2k+1] << 4 in little-endian memory order).
//
// e2m1x8_sw: the software path, host + device, equal to kvq::e2m1_from_float (the reference) for
// every float (all 2^32 checked on the host by tests/cuda/e2m1_host_exhaustive_test.cpp and
// on the GPU by GpuCodecs.E2m1SoftwareExhaustive). No double, no table, no branch:
//   c     = min(y, 6)                        NaN -> +6 (min returns the non-NaN operand); keeps
//                                            the sign of every non-NaN y, -0.0 included
//   m     = min(|c|, 6)                      the magnitude, saturated
//   t     = fma(m, -9/16, 2^24 + 2)          one rounding across 2^24, where the ulp halves:
//                                            t = 2^24 + 2 - E with E = 0 below m = 16/9,
//                                            1 up to m = 40/9, 2 above (see binade_of)
//   magic = 2^22 * 2^E + 2E ulps             the float whose ulp is the E2M1 step at m (0.5 in
//                                            [0, 2), 1 in [2, 4), 2 in [4, 6]); its bits are
//                                            linear in E: one integer multiply-add
//   r     = m + magic                        ONE IEEE add rounds m to the E2M1 grid, ties to the
//                                            even step = the even code (the 2E extra ulps are
//                                            even, so they do not change which neighbour wins);
//                                            r's low 3 bits are then idx + 2E = the E2M1 code
//   word  = funnel-shift r's low nibble into the top of an accumulator, OR in c's sign bit;
//           after 8 elements element i sits in bits [4i, 4i+4).
// E may be one binade low or high near a binade edge without changing the code: for m in
// [1.75, 2.25] both step 0.5 and step 1 round to 2 (ties included), for m in [3.5, 4.5] both
// step 1 and step 2 round to 4; E's switches at 16/9 and 40/9 lie inside those windows. E and
// magic come from the FMA pipe (FFMA, IMAD): two instructions an element, none on the ALU pipe
// (docs/kernel-design.md, v9, v20).
// e2m1x8_hw: sm_100's cvt.rn.satfinite.e2m1x2.f32 (two elements per instruction). Only defined
// in device code compiled for an arch that has it (KVQ_HAVE_HW_E2M1); the plugin's probe
// compares it with the software path on the boundary values before any write uses it.
#include <cstdint>

#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/hd.h"

#if defined(__CUDA_ARCH__) &&                                                      \
    (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM101_ALL) || \
     defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM110_ALL) || \
     defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL))
#define KVQ_HAVE_HW_E2M1 1
#else
#define KVQ_HAVE_HW_E2M1 0
#endif

namespace kvq::cuda {

namespace detail {

// min(a, 6) with "a NaN gives 6": FMNMX on the device (which returns the non-NaN operand);
// written as a comparison on the host, where fminf of a signaling NaN may return NaN.
KVQ_HD float min6(float a) {
#if defined(__CUDA_ARCH__)
  return fminf(a, 6.0f);
#else
  return a < 6.0f ? a : 6.0f;
#endif
}
KVQ_HD float abs_min6(float a) {
#if defined(__CUDA_ARCH__)
  return fminf(fabsf(a), 6.0f);
#else
  const float m = kvq::detail::bits_to_float(kvq::detail::float_to_bits(a) & 0x7FFFFFFFu);
  return m < 6.0f ? m : 6.0f;
#endif
}
// 2^24 + 2 - E for m in [0, 6]: the E2M1 binade up to the edges that do not matter (see above),
// by one multiply-add. The exact value 2^24 + 2 - 9m/16 falls from 2^24 + 2, where the ulp is 2,
// through 2^24 to 2^24 - 1.375, where it is 1: so it rounds to 2^24 + 2 while 9m/16 < 1, to 2^24
// up to 9m/16 = 5/2, and to 2^24 - 1 up to 9m/16 = 7/2 (no float m lands on a tie),
// i.e. m = 56/9 > 6. On a uniform grid (an FADD, then an FFMA) the second switch can only come
// at 3x the first; across the binade edge it comes at 2.5x, which fits both windows.
// The host computes the same in double: m * 9/16 is exact there, and so is the difference
// for every m >= 1/2 (the difference then spans at most 53 significant bits), which covers both
// switch points; below 1/2 the exact value is within 0.29 of 2^24 + 2, and the double's error
// (< 2^-28) cannot carry it across the switch at 2^24 + 1.
KVQ_HD float binade_of(float m) {
  constexpr float kTop = 16777218.0f;  // 2^24 + 2
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(m, -0.5625f, kTop);
#else
  return static_cast<float>(static_cast<double>(kTop) - static_cast<double>(m) * 0.5625);
#endif
}
KVQ_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
// (hi:lo) >> 4, low 32 bits.
KVQ_HD uint32_t shift_in_nibble(uint32_t lo, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, 4);
#else
  return (lo >> 4) | (hi << 28);
#endif
}

// A magnitude m in [0, 6] rounded to the E2M1 grid by one add: the code in the low 3 bits of the
// result (bit 3 clear).
KVQ_HD uint32_t e2m1_round_magnitude(float m) {
  // bits(binade_of(m)) = 0x4B800001 - E; magic = (149 + E) << 23 | 2E = E * 0x800002 + 2^22's
  // bits 0x4A800000 = 0xE2000002 - bits * 0x800002 (mod 2^32), as 0x4B800001 * 0x800002 =
  // 0x97800002.
  const uint32_t magic = kvq::detail::float_to_bits(binade_of(m)) * 0xFF7FFFFEu + 0xE2000002u;
  return kvq::detail::float_to_bits(detail::add_rn(m, kvq::detail::bits_to_float(magic)));
}

// One element, as the accumulator takes it: the code in the low 3 bits of *r (bit 3 clear),
// the sign in bit 31 of *sign.
KVQ_HD void e2m1_parts(float y, uint32_t* r, uint32_t* sign) {
  const float c = min6(y);
  *r = e2m1_round_magnitude(abs_min6(c));
  *sign = kvq::detail::float_to_bits(c) & 0x80000000u;
}

}  // namespace detail

// One element: the 4-bit code (sign in bit 3). Equal to kvq::e2m1_from_float for every float.
KVQ_HD uint32_t e2m1_sw(float y) {
  uint32_t r, sign;
  detail::e2m1_parts(y, &r, &sign);
  return (r & 0x7u) | (sign >> 28);
}

// Eight elements y[0..7] -> nibbles, element i in bits [4i, 4i+4).
KVQ_HD uint32_t e2m1x8_sw(const float* y) {
  uint32_t acc = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < 8; ++i) {
    uint32_t r, sign;
    detail::e2m1_parts(y[i], &r, &sign);
    acc = detail::shift_in_nibble(acc, r) | sign;
  }
  return acc;
}

#if KVQ_HAVE_HW_E2M1
// Hardware path; cvt puts its first source in the high nibble.
__device__ __forceinline__ uint32_t e2m1x8_hw(const float* y) {
  uint32_t out;
  asm("{\n"
      "  .reg .b8 b0, b1, b2, b3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 b0, %2, %1;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 b1, %4, %3;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 b2, %6, %5;\n"
      "  cvt.rn.satfinite.e2m1x2.f32 b3, %8, %7;\n"
      "  mov.b32 %0, {b0, b1, b2, b3};\n"
      "}"
      : "=r"(out)
      : "f"(y[0]), "f"(y[1]), "f"(y[2]), "f"(y[3]), "f"(y[4]), "f"(y[5]), "f"(y[6]), "f"(y[7]));
  return out;
}
#endif

#if defined(__CUDACC__)
// Eight products y[i] = __fmul_rn(x[i], s) -> nibbles, the write kernel's E2M1: hardware when
// compiled for an arch that has it and the writer enabled it (kUseHw, the kernel's template flag),
// else e2m1x8_sw(y) one instruction per element cheaper. A GPU FP32 multiply returns the canonical
// NaN 0x7FFFFFFF (sign clear) whatever the NaN it made or was given, so the product's own sign bit
// is the E2M1 sign (NaN -> +6) and the min(y, 6) that e2m1_parts needs for a NaN of either sign
// goes. The multiply is in here so that no caller can hand over a NaN that did not come from one
// (GpuCodecs.E2m1ProductExhaustive: every x with s = 1, negative NaNs included).
template <bool kUseHw>
__device__ __forceinline__ uint32_t e2m1x8_products(const float* x, float s) {
  float y[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = __fmul_rn(x[i], s);
#if KVQ_HAVE_HW_E2M1
  if constexpr (kUseHw) return e2m1x8_hw(y);
#endif
  uint32_t acc = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t r = detail::e2m1_round_magnitude(fminf(fabsf(y[i]), 6.0f));  // NaN -> 6
    acc = detail::shift_in_nibble(acc, r) | (__float_as_uint(y[i]) & 0x80000000u);
  }
  return acc;
}
#endif

}  // namespace kvq::cuda
