#pragma once
// Float <-> bit pattern and IEEE round-to-nearest arithmetic that means the same on the host and
// in device code. On the device the _rn intrinsics keep nvcc from contracting a*b+c into an FMA
// or using an approximate division under --use_fast_math: the format is defined to the bit.
#include <cstdint>
#include <cstring>

#include "kvq/layouts/hd.h"

namespace kvq::detail {

KVQ_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVQ_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// a * b, rounded to nearest even (never fused with a neighbouring add).
KVQ_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// a / b, correctly rounded to nearest even (never the approximate division).
KVQ_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace kvq::detail
