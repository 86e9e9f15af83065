// make_layout(): cache.format -> the PageLayout that implements it.
#include "format_table.h"

#include <array>

#include "kvq/core/status.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq {
namespace {

constexpr std::array kFormats = {
    detail::FormatEntry{"nvfp4", &detail::make_nvfp4_layout},
};

}  // namespace

std::vector<std::string> known_formats() {
  std::vector<std::string> out;
  for (const auto& f : kFormats) out.emplace_back(f.name);
  return out;
}

std::unique_ptr<PageLayout> make_layout(const CacheSpec& spec) {
  for (const auto& f : kFormats) {
    if (f.name == spec.format) return f.make(spec);
  }
  std::string known;
  for (const auto& f : kFormats) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw Error(ErrorCode::invalid_argument,
              "unknown cache format '" + spec.format + "': expected one of " + known,
              "cache.format");
}

}  // namespace kvq
