#pragma once
// The NVFP4 group quantizer as the write kernel runs it: steps 1..6 of
// docs/format.md on 16 floats held in registers, bit-identical to
// kvq::nvfp4_quantize_group (the definition; GPU parity tests compare every byte):
//   step 1   amax = max over |x| ignoring NaN, as nvfp4_amax (group_amax, input_groups.cuh)
//   step 2   the same two __fmul_rn products as nvfp4_scale_byte
//   step 3   E4M3 by the hardware converter (cvt.rn.satfinite.e4m3x2.f32, one F2FP.SATFINITE on
//            sm_89+), equal to kvq::e4m3_from_float for all 2^32 inputs
//            (GpuCodecs.E4m3HardwareEncodeExhaustive); decoded by cvt f16x2.e4m3x2 + cvt f32.f16,
//            exact for all 256 codes (GpuCodecs.E4m3DecodeAllCodes)
//   step 4   __frcp_rn (IEEE reciprocal, correctly rounded) = div_rn(1, x) for every x; with
//            fast_rcp (the write's scales keep every divisor in reciprocal_window_holds'
//            window) its in-window path alone, rcp_rn_in_window
//   step 5-6 __fmul_rn, then E2M1 8 at a time (e2m1x8_products, e2m1_fast.h)
#include <cuda_fp16.h>

#include <cstdint>

#include "e2m1_fast.h"
#include "input_groups.cuh"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq::cuda {

// The E4M3 byte of x in the low half of a 16-bit pair whose high byte is 0 (the code of +0):
// cvt's e4m3x2 form, kept 16 bits wide so that neither the decode below nor the byte stores need
// the mask an 8-bit result costs (docs/kernel-design.md, v23).
__device__ __forceinline__ uint16_t e4m3_encode(float x) {
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
  return pair;
}

// The value of an E4M3 pair's low code (high byte 0): cvt f16x2.e4m3x2 (exact), low half to float.
__device__ __forceinline__ float e4m3_decode(uint16_t pair) {
  float f;
  asm("{\n"
      "  .reg .b16 lo, hi;\n"
      "  .reg .b32 h2;\n"
      "  cvt.rn.f16x2.e4m3x2 h2, %1;\n"
      "  mov.b32 {lo, hi}, h2;\n"
      "  cvt.f32.f16 %0, lo;\n"
      "}"
      : "=f"(f)
      : "h"(pair));
  return f;
}

// 1/x correctly rounded for x normal and below 2^126 (exponent field 1..252). This is what
// __frcp_rn runs for such x (MUFU.RCP refined by one Newton step; in the SASS), without its
// per-call range check and the branch to a slow-path call behind it: 9 instructions issued a
// group instead of 15 (docs/kernel-design.md, v21). Equal to __frcp_rn for every x in that window
// (GpuCodecs.ReciprocalInWindowExhaustive); outside it, wrong (no denormals, no overflow).
__device__ __forceinline__ float rcp_rn_in_window(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return __fmaf_rn(r, __fmaf_rn(-x, r, 1.0f), r);  // r + r * (1 - x r)
}

struct QuantizedGroup {
  uint16_t scale;    // E4M3 byte in the low half, 0 in the high (e4m3_encode)
  uint32_t data[2];  // 16 nibbles: element i of the group in bits [4(i%8), 4(i%8)+4) of data[i/8]
};

// One group's 16 input elements -> scale byte and 8 data bytes. `global` = 1 / k_scale,
// `inv_global` = 1 / global; fast_rcp only where reciprocal_window_holds(inv_global).
template <InputType In, bool kUseHwE2m1>
__device__ __forceinline__ QuantizedGroup quantize_group16(const RawGroup<In>& raw, float global,
                                                           float inv_global, bool fast_rcp) {
  float x[16];
  widen_group<In>(raw, x);
  const float amax = group_amax<In>(raw, x);
  const float r6 = __uint_as_float(kNvfp4R6Bits);
  QuantizedGroup q;
  q.scale = e4m3_encode(__fmul_rn(global, __fmul_rn(amax, r6)));
  const float sf = e4m3_decode(q.scale);
  const float divisor = __fmul_rn(sf, inv_global);
  // Reciprocal first, zero test after, as a select: no branch around the common path, which is
  // rcp_rn_in_window's three instructions (sf = 0 makes it NaN; the select discards it).
  float out = rcp_rn_in_window(divisor);
  if (!fast_rcp) out = __frcp_rn(divisor);
  out = sf != 0.0f ? out : 0.0f;
  q.data[0] = e2m1x8_products<kUseHwE2m1>(x, out);
  q.data[1] = e2m1x8_products<kUseHwE2m1>(x + 8, out);
  return q;
}

}  // namespace kvq::cuda
