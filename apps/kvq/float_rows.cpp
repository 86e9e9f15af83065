#include "float_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kvq/core/bf16.h"
#include "kvq/core/status.h"

namespace kvq::app {
namespace {

// IEEE half to float, exactly (every half is a float).
float f16_to_float(uint16_t h) {
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) {
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : sign * std::numeric_limits<float>::infinity();
  }
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

}  // namespace

std::vector<float> to_floats(const SafetensorsTensor& t, const std::string& source) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const uint8_t* p = t.bytes.data();
  switch (t.dtype) {
    case DType::f32: std::memcpy(out.data(), p, n * sizeof(float)); break;
    case DType::bf16:
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = 0;
        std::memcpy(&h, p + 2 * i, sizeof h);
        out[i] = t.dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
      }
      break;
    default:
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: tensor '{}': dtype {}: expected BF16, F16 or F32", source,
                              t.name, safetensors_dtype_name(t.dtype)));
  }
  return out;
}

void ErrorAccumulator::add(double x, double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  const double d = x - y;
  diff2_ += d * d;
  ref2_ += x * x;
  max_ = std::max(max_, std::abs(d));
  ++n_;
}

ErrorFigures ErrorAccumulator::figures() const {
  return {ref2_ > 0 ? std::sqrt(diff2_ / ref2_) : 0.0, max_, n_};
}

}  // namespace kvq::app
