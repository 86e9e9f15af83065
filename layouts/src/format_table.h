#pragma once
// Every cache format, one row each. Adding a format: write its PageLayout in its own file with a
// make_<format>_layout() function, declare it here and add one row to kFormats (format_table.cpp).
#include <memory>
#include <string_view>

#include "kvq/core/cache_spec.h"
#include "kvq/core/page_layout.h"

namespace kvq::detail {

struct FormatEntry {
  std::string_view name;  // the cache.format word
  std::unique_ptr<PageLayout> (*make)(const CacheSpec&);
};

std::unique_ptr<PageLayout> make_nvfp4_layout(const CacheSpec& spec);  // nvfp4_page_layout.cpp

}  // namespace kvq::detail
