// Nvfp4PageLayout: validates a CacheSpec, then answers from its descriptor.
#include "kvq/layouts/nvfp4_page_layout.h"

#include <fmt/format.h>

#include <limits>

#include "format_table.h"
#include "kvq/core/status.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/layouts/nvfp4_scale_refusal.h"

namespace kvq {
namespace {

struct OrderWord {
  const char* name;
  Order order;
};
constexpr OrderWord kOrders[] = {{"HND", Order::HND}, {"NHD", Order::NHD}};

[[noreturn]] void refuse(const std::string& key, const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message, key);
}

void require_positive(int64_t value, const char* field) {
  if (value < 1) {
    refuse(std::string("cache.") + field, fmt::format("{} must be >= 1, found {}", field, value));
  }
}

Order parse_order(const std::string& word) {
  for (const auto& o : kOrders) {
    if (word == o.name) return o.order;
  }
  refuse("cache.layout.order",
         fmt::format("unknown order '{}': expected one of HND, NHD", message_text(word)));
}

std::string known_arrangements() {
  std::string out;
  for (const char* n : ScaleArrangements::names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

ScaleArrangement parse_arrangement(const std::string& word, const char* side_key) {
  ScaleArrangement a{};
  if (!ScaleArrangements::find(word, a)) {
    refuse(std::string("cache.layout.") + side_key,
           fmt::format("unknown scale arrangement '{}': expected one of {}", message_text(word),
                       known_arrangements()));
  }
  return a;
}

void check_arrangement(ScaleArrangement a, const char* side, const CacheSpec& spec,
                       int64_t groups) {
  if (auto r = ScaleArrangements::check(a, spec.block_size, groups)) {
    const std::string field = r.field;
    const int64_t found = field == "block_size" ? spec.block_size : spec.head_size;
    refuse("cache." + field, fmt::format("{} scales {} need {}; found {} {}", side,
                                         scale_arrangement_name(a), r.rule, field, found));
  }
}

// out = a * b (a + b); false on signed 64-bit overflow.
bool mul_fits(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
bool add_fits(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

}  // namespace

const char* order_name(Order order) {
  return order == Order::HND ? "HND" : "NHD";
}

const char* scale_arrangement_name(ScaleArrangement arrangement) {
  return ScaleArrangements::name_of(arrangement);
}

Nvfp4PageLayout::Nvfp4PageLayout(const CacheSpec& spec) {
  if (spec.format != "nvfp4") {
    refuse("cache.format", fmt::format("Nvfp4PageLayout needs format 'nvfp4', found '{}'",
                                       message_text(spec.format)));
  }
  require_positive(spec.num_blocks, "num_blocks");
  require_positive(spec.block_size, "block_size");
  require_positive(spec.num_kv_heads, "num_kv_heads");
  require_positive(spec.head_size, "head_size");
  for (const auto& [scale, field] :
       {std::pair{spec.k_scale, "k_scale"}, {spec.v_scale, "v_scale"}}) {
    if (!nvfp4_scale_usable(scale)) {
      refuse(std::string("cache.") + field, nvfp4_scale_refusal(field, scale));
    }
  }
  if (spec.head_size % kNvfp4GroupSize != 0) {
    refuse("cache.head_size",
           fmt::format("head_size must be a multiple of {} (one NVFP4 scale per {} elements), "
                       "found {}",
                       kNvfp4GroupSize, kNvfp4GroupSize, spec.head_size));
  }
  const int64_t T = spec.block_size, H = spec.num_kv_heads, D = spec.head_size;
  const int64_t S = D / kNvfp4GroupSize;
  const Order order = parse_order(spec.layout.order);
  const ScaleArrangement k_scales = parse_arrangement(spec.layout.k_scales, "k_scales");
  const ScaleArrangement v_scales = parse_arrangement(spec.layout.v_scales, "v_scales");
  check_arrangement(k_scales, "K", spec, S);
  check_arrangement(v_scales, "V", spec, S);

  // side_bytes = H*T*D/2 + H*T*S; offsets stay signed-64-bit so kernels may index with int64.
  int64_t rows = 0, data_bytes = 0, scale_bytes = 0, side = 0, page = 0, cache = 0;
  if (!mul_fits(H, T, rows) || !mul_fits(rows, D / 2, data_bytes) ||
      !mul_fits(rows, S, scale_bytes) || !add_fits(data_bytes, scale_bytes, side) ||
      !mul_fits(side, 2, page)) {
    refuse("cache.block_size",
           fmt::format("one page of block_size {} x num_kv_heads {} x head_size {} needs more "
                       "than 2^63-1 bytes (64-bit offsets)",
                       T, H, D));
  }
  if (!mul_fits(page, spec.num_blocks, cache)) {
    refuse("cache.num_blocks",
           fmt::format("num_blocks {} x page_bytes {} exceeds 2^63-1 bytes (64-bit offsets); "
                       "at most {} blocks fit",
                       spec.num_blocks, page, std::numeric_limits<int64_t>::max() / page));
  }

  desc_.num_blocks = spec.num_blocks;
  desc_.block_size = T;
  desc_.num_heads = H;
  desc_.head_size = D;
  desc_.groups = S;
  desc_.page_bytes = static_cast<uint64_t>(page);
  desc_.order = order;
  const auto side_bytes = static_cast<uint64_t>(side);
  const ScaleArrangement arrangements[2] = {k_scales, v_scales};
  for (int s = 0; s < 2; ++s) {
    desc_.side[s].data_base = static_cast<uint64_t>(s) * side_bytes;
    desc_.side[s].scale_base = desc_.side[s].data_base + static_cast<uint64_t>(data_bytes);
    desc_.side[s].scales = arrangements[s];
  }
  geometry_ = PageGeometry{desc_.num_blocks, desc_.block_size, desc_.num_heads, desc_.head_size};
}

int64_t Nvfp4PageLayout::group_size() const {
  return kNvfp4GroupSize;
}
int64_t Nvfp4PageLayout::data_bytes_per_group() const {
  return kNvfp4GroupBytes;
}

void Nvfp4PageLayout::check_index(int64_t token, int64_t head, int64_t group) const {
  auto check = [](int64_t v, int64_t n, const char* what, const char* bound) {
    if (v < 0 || v >= n) {
      throw Error(
          ErrorCode::out_of_range,
          fmt::format("{} {} out of range: expected 0 <= {} < {} ({})", what, v, what, n, bound));
    }
  };
  check(token, desc_.block_size, "token", "block_size");
  check(head, desc_.num_heads, "head", "num_kv_heads");
  check(group, desc_.groups, "group", "head_size / 16");
}

uint64_t Nvfp4PageLayout::data_offset(Side side, int64_t token, int64_t head, int64_t group) const {
  check_index(token, head, group);
  return desc_.data_offset(static_cast<int>(side), token, head, group);
}

uint64_t Nvfp4PageLayout::scale_offset(Side side, int64_t token, int64_t head,
                                       int64_t group) const {
  check_index(token, head, group);
  return desc_.scale_offset(static_cast<int>(side), token, head, group);
}

std::vector<Region> Nvfp4PageLayout::regions() const {
  std::vector<Region> out;
  const char* side_names[2] = {"K", "V"};
  const std::string order = order_name(desc_.order);
  for (int s = 0; s < 2; ++s) {
    const Nvfp4SideDesc& d = desc_.side[s];
    const uint64_t data_bytes = d.scale_base - d.data_base;
    const uint64_t scale_bytes =
        static_cast<uint64_t>(desc_.num_heads * desc_.block_size * desc_.groups);
    out.push_back({std::string(side_names[s]) + " data", d.data_base, data_bytes, order});
    out.push_back({std::string(side_names[s]) + " scales", d.scale_base, scale_bytes,
                   order + " " + scale_arrangement_name(d.scales)});
  }
  return out;
}

std::map<std::string, std::string> Nvfp4PageLayout::metadata() const {
  return {
      {"format", format()},
      {"order", order_name(desc_.order)},
      {"k_scales", scale_arrangement_name(desc_.side[0].scales)},
      {"v_scales", scale_arrangement_name(desc_.side[1].scales)},
      {"num_blocks", std::to_string(desc_.num_blocks)},
      {"block_size", std::to_string(desc_.block_size)},
      {"num_kv_heads", std::to_string(desc_.num_heads)},
      {"head_size", std::to_string(desc_.head_size)},
      {"group_size", std::to_string(kNvfp4GroupSize)},
      {"page_bytes", std::to_string(desc_.page_bytes)},
  };
}

namespace detail {
std::unique_ptr<PageLayout> make_nvfp4_layout(const CacheSpec& spec) {
  return std::make_unique<Nvfp4PageLayout>(spec);
}
}  // namespace detail

}  // namespace kvq
