#pragma once
// The NVFP4 block quantizer: 16 consecutive elements of a head row -> one E4M3 scale byte and
// 8 bytes of E2M1 pairs. Steps 1..6 of shared/design/nvfp4-format.md, float32 at every step,
// each product and quotient rounded to nearest. Host and device run this same code, so every
// backend writes identical bytes.
//
// The step functions are public so a kernel that spreads one group over several threads
// (amax by warp shuffle) still goes through the definition:
//   amax     = nvfp4_amax(amax, x)                 for every element (step 1)
//   scale    = nvfp4_scale_byte(amax, global)      (steps 2-3)
//   out      = nvfp4_output_scale(scale, global)   (step 4)
//   byte k   = nvfp4_pack_pair(x[2k], x[2k+1], out) (steps 5-6)
#include <cstdint>

#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/hd.h"
#include "kvq/layouts/nvfp4_codec.h"

namespace kvq {

inline constexpr int kNvfp4GroupSize = 16;  // elements per scale byte
inline constexpr int kNvfp4GroupBytes = 8;  // data bytes per group (two E2M1 codes a byte)

struct Nvfp4Group {
  uint8_t scale;    // E4M3
  uint8_t data[8];  // data[k] = q[2k] | q[2k+1] << 4
};

// The quantizer's multiplier from a dequantization scale (k_scale or v_scale): 1 / k_scale.
KVQ_HD float nvfp4_global_scale(float k_scale) {
  return detail::div_rn(1.0f, k_scale);
}

// Whether a dequantization scale can be used: finite, > 0, with a finite reciprocal `global`
// whose own reciprocal (step 4's 1 / global) is finite too. Below about 2.94e-39 (subnormal),
// 1 / k_scale is infinite and an all-zero group would quantize to NaN bytes (inf * 0) instead of
// zeros; within a few ulps of FLT_MAX, global is a subnormal whose reciprocal is infinite, and
// every group would get a non-zero scale byte over all-zero data. Every check of a host scale
// says kNvfp4ScaleRule.
KVQ_HD bool nvfp4_scale_usable(float k_scale) {
  constexpr uint32_t kExponent = 0x7F800000u;
  const auto finite = [](float f) { return (detail::float_to_bits(f) & kExponent) != kExponent; };
  const uint32_t bits = detail::float_to_bits(k_scale);  // > 0 and finite: 0 < bits < kExponent
  if (bits == 0 || bits >= kExponent) return false;
  const float global = nvfp4_global_scale(k_scale);
  return finite(global) && finite(detail::div_rn(1.0f, global));
}
// nvfp4_scale_usable as one range of bit patterns, for kernels that check a scale per thread
// (one subtraction and one compare, no division): 1 / x falls as x grows, so the usable scales
// are those from the first whose reciprocal is finite (2^-128 x (1 + 2^-21)) to the last whose
// reciprocal's reciprocal is (FLT_MAX less 3 ulps). Negative values, NaN and infinities have bit
// patterns outside it. tests/layouts/page_layout_validation_test.cpp checks it against the
// definition.
inline constexpr uint32_t kNvfp4UsableScaleBitsFirst = 0x00200001u;
inline constexpr uint32_t kNvfp4UsableScaleBitsLast = 0x7F7FFFFCu;
KVQ_HD bool nvfp4_scale_bits_usable(uint32_t bits) {
  return bits - kNvfp4UsableScaleBitsFirst <=
         kNvfp4UsableScaleBitsLast - kNvfp4UsableScaleBitsFirst;
}
inline constexpr const char* kNvfp4ScaleRule =
    "expected a finite value > 0 whose reciprocal and that reciprocal's reciprocal are finite "
    "(a dequantization scale: for NVFP4, amax / 2688 = amax / (6 x 448))";

// Step 1, one element at a time: max(amax, |x|), a NaN x leaves amax as it was.
KVQ_HD float nvfp4_amax(float amax, float x) {
  const float ax = detail::bits_to_float(detail::float_to_bits(x) & 0x7FFFFFFFu);
  return ax > amax ? ax : amax;  // false for NaN
}

// R6 of step 2: float32(1/6) rounded to nearest, as bits (kernels that spread a group over
// threads use it too).
inline constexpr uint32_t kNvfp4R6Bits = 0x3E2AAAABu;

// Steps 2-3: sf_raw = global * (amax * R6); E4M3(sf_raw).
KVQ_HD uint8_t nvfp4_scale_byte(float amax, float global_scale) {
  const float r6 = detail::bits_to_float(kNvfp4R6Bits);
  return e4m3_from_float(detail::mul_rn(global_scale, detail::mul_rn(amax, r6)));
}

// Step 4: out_scale = sf != 0 ? 1 / (sf * (1 / global)) : 0, exact reciprocals.
KVQ_HD float nvfp4_output_scale(uint8_t scale_byte, float global_scale) {
  const float sf = e4m3_to_float(scale_byte);
  if (sf == 0.0f) return 0.0f;
  return detail::div_rn(1.0f, detail::mul_rn(sf, detail::div_rn(1.0f, global_scale)));
}

// Steps 5-6 for one byte: the even element in the low nibble.
KVQ_HD uint8_t nvfp4_pack_pair(float x_even, float x_odd, float out_scale) {
  const uint8_t lo = e2m1_from_float(detail::mul_rn(x_even, out_scale));
  const uint8_t hi = e2m1_from_float(detail::mul_rn(x_odd, out_scale));
  return static_cast<uint8_t>(lo | (hi << 4));
}

// Steps 1..6 on x16[0..15] (float32; bf16/fp16 inputs convert exactly).
KVQ_HD Nvfp4Group nvfp4_quantize_group(const float* x16, float global_scale) {
  float amax = 0.0f;
  for (int i = 0; i < kNvfp4GroupSize; ++i) amax = nvfp4_amax(amax, x16[i]);
  Nvfp4Group g{};
  g.scale = nvfp4_scale_byte(amax, global_scale);
  const float out = nvfp4_output_scale(g.scale, global_scale);
  for (int k = 0; k < kNvfp4GroupBytes; ++k) {
    g.data[k] = nvfp4_pack_pair(x16[2 * k], x16[2 * k + 1], out);
  }
  return g;
}

// A group's dequantization step: E4M3 scale * k_scale (one rounding).
KVQ_HD float nvfp4_dequantize_step(uint8_t scale, float k_scale) {
  return detail::mul_rn(e4m3_to_float(scale), k_scale);
}

// THE definition of dequantization (every reader uses it, so CPU and GPU readers agree bit for
// bit): E2M1 value * (E4M3 scale * k_scale). `code` is read from its low nibble. A reader that
// decodes several codes of a group at once takes the step once and multiplies each value by it.
KVQ_HD float nvfp4_dequantize(uint8_t code, uint8_t scale, float k_scale) {
  return detail::mul_rn(e2m1_to_float(code), nvfp4_dequantize_step(scale, k_scale));
}

}  // namespace kvq
