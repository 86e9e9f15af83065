#pragma once
// E2M1 codes as E4M3 bytes, for attention_kernel.cu's nvfp4 decode: sm_90 converts E4M3 pairs to
// f16 in hardware but has no E2M1 conversion, so each code is moved into an E4M3 byte of the same
// value / 64 (a shift, two masks and a multiply-add for four codes in the SASS) and converted as
// fp8. Host + device: the host unit-tests what the kernel runs
// (tests/cuda/attention_plan_test.cpp).
#include <cstdint>

#include "kvq/layouts/hd.h"

namespace kvq::cuda {

// Four of the eight E2M1 codes of `word` (element i in bits [4i, 4i + 4)) as E4M3 bytes of the
// same value / 64, exactly: elements 0 2 4 6 (odd = false) or 1 3 5 7 (odd = true), in bytes 0..3.
// A code's bits s e1 e0 m land at bits 5..2, so the byte reads as E4M3 exponent 0 0 e1 e0 and
// mantissa m 0 0: 2^(e - 7) (1 + m/2), or 2^-6 m/2 when e = 0, which is the E2M1 value / 64. Adding
// 3 x bit 5 (0x60) moves the sign to bit 7 and clears bits 5 and 6.
KVQ_HD uint32_t e2m1x4_to_e4m3x4(uint32_t word, bool odd) {
  const uint32_t b = (odd ? word >> 2 : word << 2) & 0x3C3C3C3Cu;
  return b + 3u * (b & 0x20202020u);
}

}  // namespace kvq::cuda
