#pragma once
// Loading one 16-element group of a K or V head row ([T, H, D], last dim contiguous, every row
// start 16-byte aligned: checked on the host) as 16-byte vectors, and widening it to float.
// bf16 and f16 convert exactly; the loads are issued before any of them is used.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernel_desc.h"

namespace kvq::cuda_nvfp4 {

template <InputType In>
struct InputTraits {
  static constexpr int kElementBytes = 2;
  static constexpr int kVectors = 2;  // 16 elements x 2 bytes = two 16-byte loads
};
template <>
struct InputTraits<InputType::f32> {
  static constexpr int kElementBytes = 4;
  static constexpr int kVectors = 4;
};

template <InputType In>
struct RawGroup {
  uint4 v[InputTraits<In>::kVectors];
};

template <InputType In>
__device__ __forceinline__ RawGroup<In> load_group(const void* row_start) {
  const auto* p = static_cast<const uint4*>(row_start);
  RawGroup<In> r;
#pragma unroll
  for (int k = 0; k < InputTraits<In>::kVectors; ++k) r.v[k] = __ldg(p + k);
  return r;
}

// Two packed 16-bit values -> two floats (low half is the lower-addressed element).
template <InputType In>
__device__ __forceinline__ void widen_pair(uint32_t w, float& lo, float& hi) {
  if constexpr (In == InputType::bf16) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
  } else {
    __half2_raw raw;
    raw.x = static_cast<unsigned short>(w & 0xFFFFu);
    raw.y = static_cast<unsigned short>(w >> 16);
    const float2 f = __half22float2(__half2(raw));
    lo = f.x;
    hi = f.y;
  }
}

template <InputType In>
__device__ __forceinline__ void widen_group(const RawGroup<In>& r, float (&x)[16]) {
  if constexpr (In == InputType::f32) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[4 * k + 0] = __uint_as_float(r.v[k].x);
      x[4 * k + 1] = __uint_as_float(r.v[k].y);
      x[4 * k + 2] = __uint_as_float(r.v[k].z);
      x[4 * k + 3] = __uint_as_float(r.v[k].w);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      widen_pair<In>(r.v[k].x, x[8 * k + 0], x[8 * k + 1]);
      widen_pair<In>(r.v[k].y, x[8 * k + 2], x[8 * k + 3]);
      widen_pair<In>(r.v[k].z, x[8 * k + 4], x[8 * k + 5]);
      widen_pair<In>(r.v[k].w, x[8 * k + 6], x[8 * k + 7]);
    }
  }
}

}  // namespace kvq::cuda_nvfp4
