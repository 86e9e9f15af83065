#pragma once
// The per-element formats' codecs as the kernels run them, a chunk at a time, bit for bit
// kvq::ElementCodec (kvq/layouts/element_quantize.h, the definition reference_cpu runs):
//   fp8 write   x / s by __fdiv_rn (IEEE division; skipped for s = 1, where it is the identity),
//               then two elements an instruction by cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: RNE,
//               saturating to the largest finite value (infinities too), any NaN -> 0x7F, -0
//               kept. Equal to kvq::e4m3_from_float / e5m2_from_float on all 2^32 inputs, both
//               lanes (GpuCodecs.Fp8PairEncodersExhaustive).
//   bf16 write  kvq::float_to_bf16 (RNE, NaN quieted keeping sign and payload top bits); a bf16
//               input word goes through as it is, signalling NaNs quieted (the same result).
//   read        kvq's decoders, times s by __fmul_rn; a NaN code reads as the decoder's NaN (sign
//               kept), as the host's multiply leaves it (the GPU's would give 0x7FFFFFFF).
#include <cuda_fp16.h>

#include <cstdint>

#include "element_kernel_desc.h"
#include "input_groups.cuh"
#include "kvq/core/bf16.h"
#include "kvq/layouts/element_quantize.h"

namespace kvq::cuda {

// A writer's chunk of one side: kElems page elements (16 bytes of codes) from kWords 32-bit
// words of input (kVectors 16-byte vectors).
template <int Format, InputType In>
struct ChunkTraits {
  static constexpr int kElems = Format == KVQ_FORMAT_BF16 ? 8 : 16;
  static constexpr int kElemBytes = In == InputType::f32 ? 4 : 2;
  static constexpr int kInBytes = kElems * kElemBytes;
  static constexpr int kVectors = kInBytes / 16;
  static constexpr int kWords = kInBytes / 4;
};

// Two fp8 codes of `Format`, lo's in the low byte, in the low half (the high half 0).
template <int Format>
__device__ __forceinline__ uint32_t fp8x2_encode(float lo, float hi) {
  uint16_t pair;
  if constexpr (Format == KVQ_FORMAT_FP8_E4M3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  }
  return pair;
}

// kvq::float_to_bf16 of the two bf16 values of w widened to float: each as it is, a NaN made
// quiet (| 0x40). RNE of a widened bf16 adds at most 0x8000 to zero low bits: no carry.
__device__ __forceinline__ uint32_t bf16x2_requantize(uint32_t w) {
  const uint32_t lo_nan = (w & 0x7FFFu) > 0x7F80u ? 0x0040u : 0u;
  const uint32_t hi_nan = ((w >> 16) & 0x7FFFu) > 0x7F80u ? 0x00400000u : 0u;
  return w | lo_nan | hi_nan;
}

// Element e (compile-time) of the input words as float.
template <InputType In>
__device__ __forceinline__ float widen_element(const uint32_t* w, int e) {
  if constexpr (In == InputType::f32) {
    return __uint_as_float(w[e]);
  } else {
    float lo, hi;
    widen_pair<In>(w[e / 2], lo, hi);
    float x = (e & 1) ? hi : lo;
    if constexpr (In == InputType::f16) {
      // __half22float2 gives the canonical NaN; the format keeps a NaN's sign and payload (the
      // reference widens exactly), which bf16 pages store. fp8 codes of every NaN are 0x7F.
      const uint32_t h = (e & 1) ? (w[e / 2] >> 16) : (w[e / 2] & 0xFFFFu);
      if ((h & 0x7FFFu) > 0x7C00u) {
        x = __uint_as_float(((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13));
      }
    }
    return x;
  }
}

// The 16 page bytes (4 words, element 0 in the low byte of word 0) of one chunk whose input
// words are `w` (elements past the row's end are zero and their codes never stored).
// `scale`: the side's dequantization scale (fp8 only).
template <int Format, InputType In>
__device__ __forceinline__ void encode_chunk(const uint32_t (&w)[ChunkTraits<Format, In>::kWords],
                                             float scale, uint32_t (&out)[4]) {
  using Tr = ChunkTraits<Format, In>;
  if constexpr (Format == KVQ_FORMAT_BF16) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (In == InputType::bf16) {
        out[k] = bf16x2_requantize(w[k]);
      } else {
        out[k] = static_cast<uint32_t>(float_to_bf16(widen_element<In>(w, 2 * k))) |
                 (static_cast<uint32_t>(float_to_bf16(widen_element<In>(w, 2 * k + 1))) << 16);
      }
    }
  } else {
    float x[Tr::kElems];
#pragma unroll
    for (int e = 0; e < Tr::kElems; ++e) x[e] = widen_element<In>(w, e);
    if (scale != 1.0f) {  // x / 1 is x for every x: the division only where it can change it
#pragma unroll
      for (int e = 0; e < Tr::kElems; ++e) x[e] = __fdiv_rn(x[e], scale);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[k] = fp8x2_encode<Format>(x[4 * k], x[4 * k + 1]) |
               (fp8x2_encode<Format>(x[4 * k + 2], x[4 * k + 3]) << 16);
    }
  }
}

// Code -> float times the side's scale, as ElementCodec<Format>::decode on the host.
template <int Format>
__device__ __forceinline__ float decode_element(uint32_t code, float scale) {
  if constexpr (Format == KVQ_FORMAT_BF16) {
    return bf16_to_float(static_cast<uint16_t>(code));
  } else {
    const float f = Format == KVQ_FORMAT_FP8_E4M3 ? e4m3_to_float(static_cast<uint8_t>(code))
                                                  : e5m2_to_float(static_cast<uint8_t>(code));
    const float product = __fmul_rn(f, scale);
    return f != f ? f : product;
  }
}

}  // namespace kvq::cuda
