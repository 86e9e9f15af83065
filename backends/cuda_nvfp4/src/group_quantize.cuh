#pragma once
// The NVFP4 group quantizer as the write kernel runs it: steps 1..6 of
// shared/design/nvfp4-format.md on 16 floats held in registers, bit-identical to
// kvq::nvfp4_quantize_group (the definition; GPU parity tests compare every byte):
//   step 1   amax = max over |x| ignoring NaN, as nvfp4_amax (group_amax, input_groups.cuh)
//   step 2   the same two __fmul_rn products as nvfp4_scale_byte
//   step 3   E4M3 by the hardware converter (__nv_cvt_float_to_fp8, one F2FP.SATFINITE on
//            sm_89+), equal to kvq::e4m3_from_float for all 2^32 inputs
//            (GpuCodecs.E4m3HardwareExhaustive); decoded by cvt f16x2.e4m3x2 + cvt f32.f16,
//            exact for all 256 codes (GpuCodecs.E4m3DecodeAll)
//   step 4   __frcp_rn (IEEE reciprocal, correctly rounded) = div_rn(1, x) for every x
//   step 5-6 __fmul_rn, then E2M1 8 at a time (e2m1x8_products, e2m1_fast.h)
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "e2m1_fast.h"
#include "input_groups.cuh"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq::cuda_nvfp4 {

__device__ __forceinline__ uint32_t e4m3_encode(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float e4m3_decode(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

struct QuantizedGroup {
  uint32_t scale;    // E4M3 byte in the low 8 bits
  uint32_t data[2];  // 16 nibbles: element i of the group in bits [4(i%8), 4(i%8)+4) of data[i/8]
};

// One group's 16 input elements -> scale byte and 8 data bytes. `global` = 1 / k_scale,
// `inv_global` = 1 / global.
template <InputType In, bool kUseHwE2m1>
__device__ __forceinline__ QuantizedGroup quantize_group16(const RawGroup<In>& raw, float global,
                                                           float inv_global) {
  float x[16];
  widen_group<In>(raw, x);
  const float amax = group_amax<In>(raw, x);
  const float r6 = __uint_as_float(kNvfp4R6Bits);
  QuantizedGroup q;
  q.scale = e4m3_encode(__fmul_rn(global, __fmul_rn(amax, r6)));
  const float sf = e4m3_decode(q.scale);
  const float out = sf != 0.0f ? __frcp_rn(__fmul_rn(sf, inv_global)) : 0.0f;
  q.data[0] = e2m1x8_products<kUseHwE2m1>(x, out);
  q.data[1] = e2m1x8_products<kUseHwE2m1>(x + 8, out);
  return q;
}

}  // namespace kvq::cuda_nvfp4
