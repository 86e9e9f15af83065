#include "kvq/layouts/layout_factory.h"

#include "kvq/core/status.h"

namespace kvq {

// Placeholder until the layouts issue lands.
std::unique_ptr<PageLayout> make_layout(const CacheSpec& spec) {
  throw Error(ErrorCode::invalid_argument, "format '" + spec.format + "' is not implemented yet",
              "cache.format");
}

}  // namespace kvq
