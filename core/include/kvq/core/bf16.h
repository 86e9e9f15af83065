#pragma once
// bf16 <-> float, host and CUDA device code: bf16 is the upper half of a float32's bits.
// float_to_bf16 rounds to nearest, ties to even (as PyTorch's .bfloat16() and CUDA's
// __float2bfloat16 do); a NaN stays a quiet NaN of the same sign, keeping its payload's top bits,
// so a bf16 value comes back bit for bit unless it is a signalling NaN. Header-only, no link
// needed; the bf16 cache format (docs/format.md) is defined by it.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVQ_BF16_FN __host__ __device__ __forceinline__
#else
#define KVQ_BF16_FN inline
#endif

namespace kvq {

KVQ_BF16_FN uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(f);
#else
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
#endif
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep it one, quiet
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

KVQ_BF16_FN float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f = 0.0f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

}  // namespace kvq

#undef KVQ_BF16_FN
