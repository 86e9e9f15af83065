#pragma once
// The per-element cache formats (docs/format.md): one code per element, no scale region.
//
//   fp8_e4m3, fp8_e5m2:  q = fp8(x / s)   x / s an IEEE f32 division, rounded to nearest even and
//                                         saturating (kvq/layouts/fp8_codec.h): vLLM's
//                                         __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, ...)
//                        x' = float(q) * s
//   bf16:                q = bf16(x)      nearest even, NaN stays NaN (kvq/core/bf16.h)
//                        x' = float(q)    (no scale: s must be 1)
//
// s is the dequantization scale of the element's side (k_scale or v_scale), or of its head where
// the writer is given per-head scales. Host and device run this same code (KVQ_HD), so every
// backend writes identical bytes. ElementCodec<format> names the pair for code templated on the
// format.
#include <cstdint>

#include "kvq/abi/page.h"
#include "kvq/core/bf16.h"
#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/fp8_codec.h"
#include "kvq/layouts/hd.h"

namespace kvq {

template <int Format>
struct ElementCodec;

template <>
struct ElementCodec<KVQ_FORMAT_FP8_E4M3> {
  using Code = uint8_t;
  KVQ_HD static Code encode(float x, float scale) {
    return e4m3_from_float(detail::div_rn(x, scale));
  }
  KVQ_HD static float decode(Code q, float scale) {
    return detail::mul_rn(e4m3_to_float(q), scale);
  }
};

template <>
struct ElementCodec<KVQ_FORMAT_FP8_E5M2> {
  using Code = uint8_t;
  KVQ_HD static Code encode(float x, float scale) {
    return e5m2_from_float(detail::div_rn(x, scale));
  }
  KVQ_HD static float decode(Code q, float scale) {
    return detail::mul_rn(e5m2_to_float(q), scale);
  }
};

template <>
struct ElementCodec<KVQ_FORMAT_BF16> {
  using Code = uint16_t;
  KVQ_HD static Code encode(float x, float /*scale: 1*/) { return float_to_bf16(x); }
  KVQ_HD static float decode(Code q, float /*scale: 1*/) { return bf16_to_float(q); }
};

}  // namespace kvq
