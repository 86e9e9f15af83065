#include "kvq/layouts/nvfp4_scale_refusal.h"

#include <fmt/format.h>

#include <cmath>

#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq {

std::string nvfp4_scale_refusal(std::string_view name, float scale) {
  if (std::isnan(scale)) return fmt::format("{} = nan: {}", name, kNvfp4ScaleRule);
  return fmt::format("{} = {}: {}", name, scale, kNvfp4ScaleRule);
}

}  // namespace kvq
