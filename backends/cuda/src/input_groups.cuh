#pragma once
// Loading one 16-element group of a K or V head row ([T, H, D], last dim contiguous, every row
// start 16-byte aligned: checked on the host) as 16-byte vectors, and widening it to float.
// bf16 and f16 convert exactly; the loads are issued before any of them is used.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernel_desc.h"

namespace kvq::cuda {

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

// One group's 16-byte vectors. kStreaming: evict-first (ld.global.cs), else the read-only path
// (ld.global.nc); both read each byte once (WriteKernelDesc::streaming_loads says when which).
template <InputType In, bool kStreaming>
__device__ __forceinline__ RawGroup<In> load_group(const void* row_start) {
  const auto* p = static_cast<const uint4*>(row_start);
  RawGroup<In> r;
#pragma unroll
  for (int k = 0; k < InputTraits<In>::kVectors; ++k) {
    r.v[k] = kStreaming ? __ldcs(p + k) : __ldg(p + k);
  }
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

// Step 1 of the quantizer, max |x| over the group with NaN ignored (0 for an all-NaN group), as
// kvq::nvfp4_amax. 16-bit input: on the packed words (|.| of two elements per instruction, then
// a max tree of bf16x2 / f16x2 maxima, which return the non-NaN operand as fmaxf does); exact,
// since the maximum of 16-bit values is one of them. Half the instructions of the float tree,
// and off the ALU pipe that bounds the write kernel (docs/kernel-design.md, v7).
template <InputType In>
__device__ __forceinline__ float group_amax(const RawGroup<In>& r, const float (&x)[16]) {
  if constexpr (In == InputType::f32) {
    // 4 independent chains so the maxima do not serialize.
    float m0 = fabsf(x[0]), m1 = fabsf(x[1]), m2 = fabsf(x[2]), m3 = fabsf(x[3]);
#pragma unroll
    for (int i = 4; i < 16; i += 4) {
      m0 = fmaxf(m0, fabsf(x[i]));
      m1 = fmaxf(m1, fabsf(x[i + 1]));
      m2 = fmaxf(m2, fabsf(x[i + 2]));
      m3 = fmaxf(m3, fabsf(x[i + 3]));
    }
    // fmaxf(0, ...) last: an all-NaN group gives 0 exactly as the reference's running max from 0.
    return fmaxf(fmaxf(fmaxf(m0, m1), fmaxf(m2, m3)), 0.0f);
  } else {
    using Pair = std::conditional_t<In == InputType::bf16, __nv_bfloat162, __half2>;
    const uint32_t w[8] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w,
                           r.v[1].x, r.v[1].y, r.v[1].z, r.v[1].w};
    Pair m[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) m[i] = __habs2(*reinterpret_cast<const Pair*>(&w[i]));
    // Nine operands, zero among them (an all-NaN lane gives 0, as the reference's running max
    // from 0), in max(max(a, b), c) triples: ptxas fuses each into one three-input VHMNMX, four
    // in all, where a pairwise tree and a float max with 0 took six.
    const uint32_t zero_bits = 0;  // +0 in both lanes, bf16 or f16
    const Pair zero = *reinterpret_cast<const Pair*>(&zero_bits);
    const Pair t0 = __hmax2(__hmax2(m[0], m[1]), m[2]);
    const Pair t1 = __hmax2(__hmax2(m[3], m[4]), m[5]);
    const Pair t2 = __hmax2(__hmax2(m[6], m[7]), zero);
    const Pair top = __hmax2(__hmax2(t0, t1), t2);
    float lo, hi;
    widen_pair<In>(*reinterpret_cast<const uint32_t*>(&top), lo, hi);
    return fmaxf(lo, hi);
  }
}

}  // namespace kvq::cuda
