#include "hw_e2m1_check.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvq/layouts/nvfp4_codec.h"

namespace kvq::cuda {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

std::vector<float> e2m1_boundary_values() {
  std::vector<float> v;
  const float points[] = {0.0f,
                          0.25f,
                          0.5f,
                          0.75f,
                          1.0f,
                          1.25f,
                          1.5f,
                          1.75f,
                          2.0f,
                          2.5f,
                          3.0f,
                          3.5f,
                          4.0f,
                          5.0f,
                          6.0f,
                          7.0f,
                          8.0f,
                          1.0e-30f,
                          1e30f,
                          65504.0f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min()};
  const float inf = std::numeric_limits<float>::infinity();
  for (float p : points) {
    for (float sign : {1.0f, -1.0f}) {
      const float x = sign * p;
      v.push_back(x);
      v.push_back(std::nextafter(x, inf));
      v.push_back(std::nextafter(x, -inf));
    }
  }
  for (uint32_t bits : {0x00000001u, 0x007FFFFFu, 0x00400000u, 0x80000001u, 0x807FFFFFu,
                        0x7F800000u, 0xFF800000u,                               // infinities
                        0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu,     // quiet NaNs
                        0x7F800001u, 0xFF800001u, 0x7FA00000u, 0xFFA00000u}) {  // signaling
    v.push_back(from_bits(bits));
  }
  while (v.size() % 8 != 0) v.push_back(0.0f);
  return v;
}

Status check_hw_e2m1(int ordinal, int cc_major, HwE2m1Verdict* out) noexcept {
  return catch_as_status([&] {
    *out = HwE2m1Verdict{};
    if (cc_major < 10) {
      out->detail = "software E2M1 (no hardware FP4 conversion before sm_100)";
      return;
    }
    const std::vector<float> values = e2m1_boundary_values();
    std::vector<uint32_t> hw_words, sw_words;
    bool has_hw = false;
    throw_if_error(run_e2m1_hw_sw(ordinal, values, &hw_words, &sw_words, &has_hw));
    if (!has_hw) {
      out->detail = "software E2M1 (this build has no hardware FP4 path for this device)";
      return;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t hw = (hw_words[i / 8] >> (4 * (i % 8))) & 0xFu;
      const uint32_t sw = (sw_words[i / 8] >> (4 * (i % 8))) & 0xFu;
      const uint32_t ref = e2m1_from_float(values[i]);
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      if (sw != ref) {
        throw Error(ErrorCode::internal,
                    fmt::format("software E2M1 on cuda:{} gives {:#x} for float bits {:#010x}, "
                                "the reference {:#x}: this build is broken",
                                ordinal, sw, bits, ref));
      }
      if (hw != ref) {
        out->detail = fmt::format(
            "software E2M1: hardware cvt.rn.satfinite.e2m1x2.f32 refused, it gives {:#x} for "
            "float bits {:#010x} where the reference gives {:#x}",
            hw, bits, ref);
        return;
      }
    }
    out->use_hw = true;
    out->detail = fmt::format(
        "hardware E2M1 (cvt.rn.satfinite.e2m1x2.f32, equal to the software path on {} boundary "
        "values)",
        values.size());
  });
}

}  // namespace kvq::cuda
