// make_layout(): the page (PageLayout::from_spec) and the spec's default scales.
#include "kvq/layouts/layout_factory.h"

#include <string>
#include <utility>

#include "kvq/core/scale_rule.h"
#include "kvq/core/status.h"

namespace kvq {

std::unique_ptr<PageLayout> make_layout(const CacheSpec& spec) {
  auto layout = std::make_unique<PageLayout>(PageLayout::from_spec(spec));
  for (const auto& [scale, field] :
       {std::pair{spec.k_scale, "k_scale"}, {spec.v_scale, "v_scale"}}) {
    if (!scale_usable(scale)) {
      throw Error(ErrorCode::invalid_argument, scale_refusal(field, scale),
                  std::string("cache.") + field);
    }
  }
  return layout;
}

}  // namespace kvq
