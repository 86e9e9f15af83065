#pragma once
// The rule every dequantization scale (k_scale, v_scale) must meet, whoever checks it: the config,
// the host contract for a host value, a kernel for a device value. A scale s is usable when it is
// finite, > 0, and its reciprocal 1 / s and that reciprocal's reciprocal are finite: the
// quantizers multiply by 1 / s (below about 2.94e-39 that is infinite, and an all-zero group
// would become NaN bytes) and NVFP4's step 4 takes 1 / (1 / s) (within 3 ulps of FLT_MAX that is
// infinite, and every group would get a scale byte over all-zero data). 1 / x falls as x grows,
// so the usable scales are one range of bit patterns; negative values, NaN and infinities lie
// outside it (tests/layouts/page_layout_validation_test.cpp checks the range against the
// definition).
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kvq/core/export.h"

namespace kvq {

inline constexpr uint32_t kUsableScaleBitsFirst = 0x00200001u;  // 2^-128 x (1 + 2^-21)
inline constexpr uint32_t kUsableScaleBitsLast = 0x7F7FFFFCu;   // FLT_MAX less 3 ulps

// One subtraction and one compare: what kernels run per thread on a device scale.
constexpr bool scale_bits_usable(uint32_t bits) {
  return bits - kUsableScaleBitsFirst <= kUsableScaleBitsLast - kUsableScaleBitsFirst;
}

inline bool scale_usable(float scale) {
  uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  return scale_bits_usable(bits);
}

inline constexpr const char* kScaleRule =
    "expected a finite value > 0 whose reciprocal and that reciprocal's reciprocal are finite "
    "(a dequantization scale: docs/config.md gives each format's calibration rule)";

// "NAME = VALUE: kScaleRule". VALUE is the shortest text that reads back as the same float, and
// "nan" for every NaN (a negative NaN from a device buffer would otherwise print as "-nan").
KVQ_API std::string scale_refusal(std::string_view name, float scale);

}  // namespace kvq
