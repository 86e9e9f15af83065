#pragma once
// One wording for every refusal of a dequantization scale that breaks kNvfp4ScaleRule
// (nvfp4_quantize.h), whoever checks it: a config, a backend's host scale, a device scale.
#include <string>
#include <string_view>

#include "kvq/core/export.h"

namespace kvq {

// "NAME = VALUE: kNvfp4ScaleRule". VALUE is the shortest text that reads back as the same float,
// and "nan" for every NaN: a negative NaN (sign bit set, as a device buffer may hold) would
// otherwise print as "-nan", which reads as a different kind of value.
KVQ_API std::string nvfp4_scale_refusal(std::string_view name, float scale);

}  // namespace kvq
