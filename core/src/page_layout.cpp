// PageLayout: the config's words -> kvq_page_desc_init (kvq/abi/page.h), and host answers read off
// the descriptor. The words and the refusals' wording live here; the numbers live in page.h.
#include "kvq/core/page_layout.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "kvq/core/status.h"

namespace kvq {
namespace {

struct Word {
  const char* name;
  int32_t value;
};
// The formats whose codecs kvq has (kvq/layouts/), in the order `kvq backends` lists them.
constexpr Word kFormats[] = {{"nvfp4", KVQ_FORMAT_NVFP4},
                             {"fp8_e4m3", KVQ_FORMAT_FP8_E4M3},
                             {"fp8_e5m2", KVQ_FORMAT_FP8_E5M2},
                             {"bf16", KVQ_FORMAT_BF16}};
constexpr Word kOrders[] = {{"HND", KVQ_ORDER_HND}, {"NHD", KVQ_ORDER_NHD}};
constexpr Word kArrangements[] = {{"linear", KVQ_SCALES_LINEAR},
                                  {"sm100_swizzled", KVQ_SCALES_SM100_SWIZZLED}};

// NVFP4's arrangements where the config names none: the SM100 trtllm-gen page.
constexpr const char* kDefaultKScales = "linear";
constexpr const char* kDefaultVScales = "sm100_swizzled";

[[noreturn]] void refuse(const std::string& key, const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message, key);
}

template <std::size_t N>
std::string words(const Word (&table)[N]) {
  std::string out;
  for (const Word& w : table) out += (out.empty() ? "" : ", ") + std::string(w.name);
  return out;
}

template <std::size_t N>
int32_t parse(const Word (&table)[N], const std::string& word, const std::string& key,
              const char* what) {
  for (const Word& w : table) {
    if (word == w.name) return w.value;
  }
  refuse(key, fmt::format("unknown {} '{}': expected one of {}", what, message_text(word),
                          words(table)));
}

}  // namespace

std::vector<std::string> known_formats() {
  std::vector<std::string> out;
  for (const Word& w : kFormats) out.emplace_back(w.name);
  return out;
}

PageLayout::PageLayout(const kvq_page_desc& desc)
    : desc_(desc), geometry_{desc.num_blocks, desc.block_size, desc.num_kv_heads, desc.head_size} {}

PageLayout PageLayout::from_spec(const CacheSpec& spec) {
  const int32_t format = parse(kFormats, spec.format, "cache.format", "cache format");
  for (const auto& [value, field] : {std::pair{spec.num_blocks, "num_blocks"},
                                     {spec.block_size, "block_size"},
                                     {spec.num_kv_heads, "num_kv_heads"},
                                     {spec.head_size, "head_size"}}) {
    if (value < 1) {
      refuse(std::string("cache.") + field, fmt::format("{} must be >= 1, found {}", field, value));
    }
  }
  const uint32_t group = kvq_format_group_size(format);
  if (group != 0 && spec.head_size % group != 0) {
    refuse("cache.head_size", fmt::format("head_size must be a multiple of {} (one {} scale per "
                                          "{} elements), found {}",
                                          group, "NVFP4", group, spec.head_size));
  }
  const int32_t order = parse(kOrders, spec.layout.order, "cache.layout.order", "order");
  int32_t arrangements[2] = {KVQ_SCALES_NONE, KVQ_SCALES_NONE};
  const std::pair<const std::string&, const char*> words_given[2] = {
      {spec.layout.k_scales, "k_scales"}, {spec.layout.v_scales, "v_scales"}};
  for (int s = 0; s < 2; ++s) {
    const auto& [word, field] = words_given[s];
    const std::string key = std::string("cache.layout.") + field;
    if (group == 0) {
      if (!word.empty()) {
        refuse(key, fmt::format("{} pages have no scale region: remove {} (found '{}')",
                                spec.format, field, message_text(word)));
      }
      continue;
    }
    const std::string& chosen = !word.empty() ? word : s == 0 ? kDefaultKScales : kDefaultVScales;
    arrangements[s] = parse(kArrangements, chosen, key, "scale arrangement");
  }
  if (format == KVQ_FORMAT_BF16) {
    for (const auto& [scale, field] :
         {std::pair{spec.k_scale, "k_scale"}, {spec.v_scale, "v_scale"}}) {
      if (scale != 1.0f) {
        refuse(std::string("cache.") + field,
               fmt::format("bf16 pages are not scaled: expected {} 1 (or no key), found {}", field,
                           scale));
      }
    }
  }

  kvq_page_desc desc{};
  int32_t side = 0;
  const int32_t refusal =
      kvq_page_desc_init(&desc, format, order, arrangements[0], arrangements[1], spec.num_blocks,
                         spec.block_size, spec.num_kv_heads, spec.head_size, &side);
  const char* side_name = side == 0 ? "K" : "V";
  switch (refusal) {
    case KVQ_PAGE_OK: return PageLayout(desc);
    case KVQ_PAGE_SWIZZLE_TOKENS:
      refuse("cache.block_size",
             fmt::format("{} scales sm100_swizzled need block_size % 4 == 0 (whole 4-token "
                         "blocks); found block_size {}",
                         side_name, spec.block_size));
    case KVQ_PAGE_SWIZZLE_GROUPS:
      refuse("cache.head_size",
             fmt::format("{} scales sm100_swizzled need head_size % 64 == 0 (groups = "
                         "head_size/16 a multiple of 4); found head_size {}",
                         side_name, spec.head_size));
    case KVQ_PAGE_TOO_LARGE:
      refuse("cache.block_size",
             fmt::format("one page of block_size {} x num_kv_heads {} x head_size {} needs 2^32 "
                         "bytes or more (pages use 32-bit offsets)",
                         spec.block_size, spec.num_kv_heads, spec.head_size));
    case KVQ_PAGE_CACHE_TOO_LARGE: {
      // The page fit: its size is what the same geometry with one block gives.
      kvq_page_desc one{};
      (void)kvq_page_desc_init(&one, format, order, arrangements[0], arrangements[1], 1,
                               spec.block_size, spec.num_kv_heads, spec.head_size, &side);
      refuse("cache.num_blocks",
             fmt::format("num_blocks {} x page_bytes {} exceeds 2^63-1 bytes (64-bit "
                         "offsets); at most {} blocks fit",
                         spec.num_blocks, one.page_bytes,
                         std::numeric_limits<int64_t>::max() / one.page_bytes));
    }
    default:
      // The words and sizes were checked above: any other refusal is a bug here.
      throw Error(ErrorCode::internal,
                  fmt::format("kvq_page_desc_init refused a checked spec (code {})", refusal));
  }
}

CacheSpec PageLayout::resolved(const CacheSpec& spec) {
  const PageLayout layout = from_spec(spec);
  CacheSpec out = spec;
  out.layout.k_scales = kvq_scale_arrangement_name(layout.desc_.scales[0]);
  out.layout.v_scales = kvq_scale_arrangement_name(layout.desc_.scales[1]);
  return out;
}

std::string PageLayout::format() const {
  return kvq_format_name(desc_.format);
}

int64_t PageLayout::group_size() const {
  return desc_.group_size != 0 ? desc_.group_size : 16;
}

int64_t PageLayout::data_bytes_per_group() const {
  return group_size() * desc_.elem_bits / 8;
}

void PageLayout::check_index(int64_t token, int64_t head, int64_t group) const {
  auto check = [](int64_t v, int64_t n, const char* what, const char* bound) {
    if (v < 0 || v >= n) {
      throw Error(
          ErrorCode::out_of_range,
          fmt::format("{} {} out of range: expected 0 <= {} < {} ({})", what, v, what, n, bound));
    }
  };
  check(token, desc_.block_size, "token", "block_size");
  check(head, desc_.num_kv_heads, "head", "num_kv_heads");
  check(group, groups(), "group", "head_size / 16");
}

uint64_t PageLayout::data_offset(Side side, int64_t token, int64_t head, int64_t group) const {
  check_index(token, head, group);
  const kvq_side_map& m = desc_.side[static_cast<int>(side)];
  return kvq_data_offset(&m, static_cast<uint32_t>(token), static_cast<uint32_t>(head)) +
         static_cast<uint64_t>(group * data_bytes_per_group());
}

uint64_t PageLayout::scale_offset(Side side, int64_t token, int64_t head, int64_t group) const {
  check_index(token, head, group);
  if (!has_scales()) {
    throw Error(ErrorCode::out_of_range,
                fmt::format("{} pages have no scale bytes", kvq_format_name(desc_.format)));
  }
  const kvq_side_map& m = desc_.side[static_cast<int>(side)];
  return kvq_scale_offset(&m, static_cast<uint32_t>(token), static_cast<uint32_t>(head),
                          static_cast<uint32_t>(group));
}

std::vector<Region> PageLayout::regions() const {
  std::vector<Region> out;
  const char* side_names[2] = {"K", "V"};
  const std::string order = kvq_order_name(desc_.order);
  for (int s = 0; s < 2; ++s) {
    const kvq_side_map& m = desc_.side[s];
    const uint64_t side_end = static_cast<uint64_t>(s + 1) * desc_.side_bytes;
    out.push_back({std::string(side_names[s]) + " data", m.data_base,
                   uint64_t{m.scale_base} - m.data_base, order});
    if (has_scales()) {
      out.push_back({std::string(side_names[s]) + " scales", m.scale_base, side_end - m.scale_base,
                     order + " " + kvq_scale_arrangement_name(desc_.scales[s])});
    }
  }
  return out;
}

std::map<std::string, std::string> PageLayout::metadata() const {
  return {
      {"format", format()},
      {"order", kvq_order_name(desc_.order)},
      {"k_scales", kvq_scale_arrangement_name(desc_.scales[0])},
      {"v_scales", kvq_scale_arrangement_name(desc_.scales[1])},
      {"num_blocks", std::to_string(desc_.num_blocks)},
      {"block_size", std::to_string(desc_.block_size)},
      {"num_kv_heads", std::to_string(desc_.num_kv_heads)},
      {"head_size", std::to_string(desc_.head_size)},
      {"group_size", std::to_string(desc_.group_size)},
      {"page_bytes", std::to_string(desc_.page_bytes)},
  };
}

}  // namespace kvq
