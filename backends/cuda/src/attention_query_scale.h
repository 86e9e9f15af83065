#pragma once
// bf16 queries enter the f16 QK product of attention_kernel.cu scaled by a power of two per head:
// the shift that puts the head's largest magnitude `top` in [2^14, 2^15), inside f16's range with
// all of bf16's significant bits, so the conversion is exact for every element down to 2^-29 of
// `top`. Host + device: the host unit-tests what the kernel runs.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvq/layouts/hd.h"

namespace kvq::cuda {

// 0 for a head of zeros, NaN or infinity (converted as they are); else 15 - e for top in
// [2^(e-1), 2^e), clamped to +-126 so that 2^shift and 2^-shift are normal floats.
KVQ_HD int query_shift(float top) {
  if (!(top > 0.0f) || !(top <= 3.40282347e38f)) return 0;
  int e = 0;
  frexpf(top, &e);
  const int shift = 15 - e;
  return shift < -126 ? -126 : shift > 126 ? 126 : shift;
}

// 2^shift, exactly, for |shift| <= 126.
KVQ_HD float pow2(int shift) {
  const uint32_t bits = static_cast<uint32_t>(127 + shift) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace kvq::cuda
