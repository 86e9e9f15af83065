#pragma once
// E2M1 encoders for the write kernel: 8 floats -> 8 nibbles in one 32-bit word (element i in bits
// [4i, 4i+4), i.e. byte k = q[2k] | q[2k+1] << 4 in little-endian memory order).
//
// e2m1x8_sw: the software path, host + device, equal to kvq::e2m1_from_float (the reference) for
// every float (all 2^32 checked on the host by tests/cuda_nvfp4/e2m1_host_exhaustive_test.cpp and
// on the GPU by GpuCodecs.E2m1SoftwareExhaustive). No double, no table, no branch, and only four
// instructions per element on the 64-lane integer/logic (ALU) pipe, which bounded the previous
// version (7 ALU ops per element: FMNMX x3, LOP3 x2, LEA.HI, funnel SHF); the rest is FP32 and
// integer multiply-add (the FMA pipe). docs/perf-notes.md has the SASS counts. Per element
// (e2m1_parts): clamp to [-6, 6] (2 FMNMX), three once-rounded lines 2^23 + {2a, a + 2, a/2 + 4}
// (3 FADD + 1 FFMA), their minimum (2 FMNMX), c * 0 for the sign; e2m1x8_sw packs 8 of them
// with IMAD / IMAD.HI.
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

namespace kvq::cuda_nvfp4 {

namespace detail {

// min(a, 6), max(a, -6), min(a, b) with "a NaN gives the other operand": FMNMX on the device;
// written as a comparison on the host, where fminf of a signaling NaN may return NaN. (min2's
// operands are never NaN.)
KVQ_HD float min6(float a) {
#if defined(__CUDA_ARCH__)
  return fminf(a, 6.0f);
#else
  return a < 6.0f ? a : 6.0f;
#endif
}
KVQ_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// fma(a, s, k) rounded once. On the host a * s is exact for the operand used here (s = 0.25,
// inexact only for a subnormal a, which k = 2^23 + 4 swamps either way), so the plain expression
// rounds the same (host builds do not contract it: no FMA instructions at the baseline ISA).
KVQ_HD float fma_rn(float a, float s, float k) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, s, k);
#else
  return a * s + k;
#endif
}
KVQ_HD float max_m6(float a) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, -6.0f);
#else
  return a > -6.0f ? a : -6.0f;
#endif
}
KVQ_HD float min2(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fminf(a, b);
#else
  return a < b ? a : b;
#endif
}
KVQ_HD float abs_f(float a) {
#if defined(__CUDA_ARCH__)
  return fabsf(a);
#else
  return kvq::detail::bits_to_float(kvq::detail::float_to_bits(a) & 0x7FFFFFFFu);
#endif
}
KVQ_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVQ_HD uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// 2^23: floats in [2^23, 2^24) have ulp 1, so fma(a, s, 2^23 + o) rounds a * s to an integer
// (ties to even) and adds the integer o; the bits of the result are 0x4B000000 + that integer.
inline constexpr float kMagic = 8388608.0f;
inline constexpr uint32_t kMagicBits = 0x4B000000u;

// One element: *t = a float whose bits are kMagicBits + the 3-bit magnitude code, *z = +-0 with
// the sign of the element (NaN counts as +6, as in kvq::e2m1_from_float).
//   c = clamp(y, -6, 6)     two FMNMX; NaN -> +6 (min returns the non-NaN operand); keeps the
//                           sign of every non-NaN y, -0.0 included
//   a = |c|, the code is rint(g(a)) for the concave piecewise-linear g(a) = min(2a, a + 2,
//   a/2 + 4): g maps the E2M1 grid 0, .5, 1, 1.5, 2, 3, 4, 6 onto 0..7 and each midpoint onto a
//   half-integer, so rounding g(a) to the nearest integer, ties to even, is E2M1's RNE (an even
//   code is an even mantissa). rint is monotone, so rint(min(...)) = min(rint(...)): three
//   fma(a, s, 2^23 + o), each rounded once, then two FMNMX.
KVQ_HD void e2m1_parts(float y, uint32_t* t, uint32_t* z) {
  const float c = max_m6(min6(y));
  // |c| only as FADD operands (abs is a free operand modifier there; fabsf on its own, or into
  // an FFMA, costs a LOP3 on the ALU pipe). a2 = 2|c| is exact.
  const float a = abs_f(c);
  const float a2 = add_rn(a, a);
  const float r1 = add_rn(a2, kMagic);
  const float r2 = add_rn(a, kMagic + 2.0f);
  const float r3 = fma_rn(a2, 0.25f, kMagic + 4.0f);
  *t = kvq::detail::float_to_bits(min2(min2(r1, r2), r3));
  *z = kvq::detail::float_to_bits(mul_rn(c, 0.0f));
}

}  // namespace detail

// One element: the 4-bit code (sign in bit 3). Equal to kvq::e2m1_from_float for every float.
KVQ_HD uint32_t e2m1_sw(float y) {
  uint32_t t, z;
  detail::e2m1_parts(y, &t, &z);
  return (t - detail::kMagicBits) + detail::mulhi(z, 17u);
}

// Eight elements y[0..7] -> nibbles, element i in bits [4i, 4i+4). Integer multiply-adds only
// (IMAD, IMAD.HI: the FMA pipe), no logic ops. z_i is 0 or 0x80000000, so
// mulhi(z_i, 2^(4i+4) + 1) = sign_i << (4i+3) (the + 1 keeps it a multiply: a power of two
// becomes a shift, an ALU op; it adds less than 1 to the 64-bit product). Element i adds
// t_i * 16^i: the kMagicBits parts sum to a constant, removed by the start value, and mod 2^32
// no nibble carries into the next. Element 7's sign is added as 8 into its nibble first.
KVQ_HD uint32_t e2m1x8_sw(const float* y) {
  constexpr uint32_t kBias = detail::kMagicBits * 0x11111111u;  // sum of kMagicBits * 16^i
  uint32_t acc = 0u - kBias;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < 8; ++i) {
    uint32_t t, z;
    detail::e2m1_parts(y[i], &t, &z);
    if (i < 7) {
      acc += t * (1u << (4 * i));
      acc += detail::mulhi(z, (1u << (4 * i + 4)) + 1u);
    } else {
      acc += (t + detail::mulhi(z, 17u)) << 28;
    }
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
// The path a kernel uses: hardware when compiled for an arch that has it and the writer enabled
// it (kUseHw is the kernel's template flag), else software.
template <bool kUseHw>
__device__ __forceinline__ uint32_t e2m1x8(const float* y) {
#if KVQ_HAVE_HW_E2M1
  if constexpr (kUseHw) return e2m1x8_hw(y);
#endif
  return e2m1x8_sw(y);
}
#endif

}  // namespace kvq::cuda_nvfp4
