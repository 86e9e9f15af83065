#pragma once
// Unsigned division by a divisor known when a write is prepared, without a divide instruction in
// the kernel: q = (umulhi(n, m) + n) >> s (Granlund-Montgomery round-up method). Valid for
// n < 2^31 and 1 <= d < 2^31; the host builder checks both limits. Plain data, host + device.
#include <cstdint>

#include "kvq/layouts/hd.h"

namespace kvq::cuda {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  // Host: the constants for `d` (1 <= d < 2^31).
  static FastDivmod make(uint32_t d) {
    FastDivmod f;
    f.divisor = d;
    uint32_t s = 0;
    while ((uint64_t{1} << s) < d) ++s;  // s = ceil(log2 d)
    f.shift = s;
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
    return f;
  }

  KVQ_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const auto hi = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return (hi + n) >> shift;
  }

  // n = q * divisor + r
  KVQ_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace kvq::cuda
