#pragma once
// Builds the PageLayout a CacheSpec describes, with the spec's default scales checked too (they
// are what the programs pass to every write). Throws kvq::Error (invalid_argument) with
// Error::key() naming the config key at fault ("cache.head_size", "cache.layout.v_scales",
// "cache.k_scale").
#include <memory>

#include "kvq/core/cache_spec.h"
#include "kvq/core/page_layout.h"

namespace kvq {

KVQ_API std::unique_ptr<PageLayout> make_layout(const CacheSpec& spec);

}  // namespace kvq
