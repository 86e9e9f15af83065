#pragma once
// E2M1 encoders for the write kernel: 8 floats -> 8 nibbles in one 32-bit word (element i in bits
// [4i, 4i+4), i.e. byte k = q[2k] | q[2k+1] << 4 in little-endian memory order).
//
// e2m1x8_sw: the software path, host + device, equal to kvq::e2m1_from_float (the reference) for
// every float (all 2^32 checked on the host by tests/cuda_nvfp4/e2m1_host_exhaustive_test.cpp and
// on the GPU by GpuCodecs.E2m1SoftwareExhaustive). About 11 integer/float instructions per
// element, no double, no table, no branch, integer compares only (so signaling NaNs
// behave like quiet ones on every compiler):
//   m     = min(|y| bits, 6.0 bits)          integer min on the pattern: inf and NaN -> 6
//   magic = 2^22 * max(1, 2^floor(log2 m))   the float whose ulp is the E2M1 step at m:
//                                            0.5 in [0, 2), 1 in [2, 4), 2 in [4, 6]
//   m + magic (one IEEE add, round to nearest even) rounds m to the E2M1 grid, ties to the even
//   multiple of the step = the even code; its bit pattern is magic's + index within the binade,
//   and code = index + 2 * log2(magic / 2^22).
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

KVQ_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace detail

// One element: the 4-bit code (sign in bit 3). Equal to kvq::e2m1_from_float for every float.
KVQ_HD uint32_t e2m1_sw(float y) {
  const uint32_t bits = kvq::detail::float_to_bits(y);
  const uint32_t a = bits & 0x7FFFFFFFu;
  const uint32_t m = a < 0x40C00000u ? a : 0x40C00000u;  // |y| clamped to 6: inf and NaN -> 6
  // Biased exponent of max(m, 1): 127, 128 or 129.
  const uint32_t e = (m > 0x3F800000u ? m : 0x3F800000u) >> 23;
  const uint32_t magic = (e + 22u) << 23;  // 2^22, 2^23 or 2^24
  const uint32_t r = kvq::detail::float_to_bits(
      detail::add_rn(kvq::detail::bits_to_float(m), kvq::detail::bits_to_float(magic)));
  const uint32_t code = r - magic + 2u * (e - 127u);
  // Bit 31 of `neg`: y is negative and not NaN (adding 0x7FFFFF carries out of bit 31 exactly
  // for the negative NaN patterns 0xFF800001..0xFFFFFFFF).
  const uint32_t neg = bits & (bits + 0x7FFFFFu);
  return code | ((neg >> 28) & 0x8u);
}

// Eight elements y[0..7] -> nibbles, element i in bits [4i, 4i+4).
KVQ_HD uint32_t e2m1x8_sw(const float* y) {
  uint32_t acc = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 7; i >= 0; --i) acc = (acc << 4) | e2m1_sw(y[i]);
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
