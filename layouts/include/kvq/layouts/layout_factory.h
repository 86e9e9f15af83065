#pragma once
// Builds the PageLayout a CacheSpec describes. Throws kvq::Error (invalid_argument) with
// Error::key() naming the config key at fault ("cache.head_size", "cache.layout.v_scales").
#include <memory>
#include <string>
#include <vector>

#include "kvq/core/cache_spec.h"
#include "kvq/core/page_layout.h"

namespace kvq {

KVQ_API std::unique_ptr<PageLayout> make_layout(const CacheSpec& spec);

// The cache.format words make_layout knows, in table order.
KVQ_API std::vector<std::string> known_formats();

}  // namespace kvq
