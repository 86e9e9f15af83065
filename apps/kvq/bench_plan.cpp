#include "bench_plan.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "kvq/core/status.h"

namespace kvq::app::bench {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// A positive decimal integer, the whole of `word`.
std::optional<int64_t> positive(std::string_view word) {
  int64_t v = 0;
  const auto* end = word.data() + word.size();
  auto [ptr, ec] = std::from_chars(word.data(), end, v);
  if (word.empty() || ec != std::errc() || ptr != end || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

std::vector<int64_t> parse_positive_list(std::string_view list, std::string_view what,
                                         int64_t max) {
  std::vector<int64_t> out;
  for (std::string_view item : split(list, ',')) {
    auto v = positive(item);
    if (!v || *v > max) {
      const std::string range = max == std::numeric_limits<int64_t>::max()
                                    ? "positive integers"
                                    : "integers in [1, " + std::to_string(max) + "]";
      throw Error(ErrorCode::invalid_argument,
                  std::string(what) + ": expected a comma-separated list of " + range +
                      ", found '" + std::string(item) + "' in '" + std::string(list) + "'");
    }
    out.push_back(*v);
  }
  return out;
}

std::vector<Shape> parse_shapes(std::string_view list) {
  std::vector<Shape> out;
  for (std::string_view item : split(list, ',')) {
    const auto fields = split(item, 'x');
    std::vector<std::optional<int64_t>> v;
    for (auto f : fields) v.push_back(positive(f));
    const bool ok = (fields.size() == 2 || fields.size() == 3) &&
                    std::all_of(v.begin(), v.end(), [](const auto& x) { return x.has_value(); });
    if (!ok) {
      throw Error(ErrorCode::invalid_argument,
                  "--shapes: expected HEADSxHEAD_SIZE or HEADSxHEAD_SIZExBLOCK_SIZE items "
                  "(e.g. 8x128,1x128x64), found '" +
                      std::string(item) + "'");
    }
    Shape s{*v[0], *v[1], std::nullopt};
    if (fields.size() == 3) s.block_size = *v[2];
    out.push_back(s);
  }
  return out;
}

std::vector<Shape> default_shapes(bool cpu) {
  if (cpu) return {{kMainHeads, kMainHeadSize, 16}, {1, 128, 16}};
  return {{8, 128, std::nullopt}, {1, 128, std::nullopt}, {4, 128, std::nullopt},
          {8, 64, std::nullopt},  {8, 256, std::nullopt}, {32, 128, std::nullopt}};
}

std::vector<int64_t> default_tokens(bool cpu) {
  std::vector<int64_t> t{1, 16, 64, 256, 1024, 4096, 16384, 65536};
  if (cpu) std::erase_if(t, [](int64_t x) { return x > kCpuMaxDefaultTokens; });
  return t;
}

std::vector<Case> make_plan(const PlanRequest& request) {
  const std::vector<Shape> shapes = request.shapes.value_or(default_shapes(request.cpu));
  const std::vector<int64_t> tokens = request.tokens.value_or(default_tokens(request.cpu));
  std::vector<int32_t> threads{0};
  if (request.cpu) threads = request.threads.value_or(std::vector<int32_t>{1, 2});
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    std::vector<int64_t> block_sizes{16};
    if (s.block_size) {
      block_sizes = {*s.block_size};
    } else if (s.num_kv_heads == kMainHeads && s.head_size == kMainHeadSize) {
      block_sizes = {16, 64, 128};
    }
    for (int64_t bs : block_sizes) {
      for (int64_t t : tokens) {
        for (int32_t n : threads) cases.push_back({s.num_kv_heads, s.head_size, bs, t, n});
      }
    }
  }
  return cases;
}

}  // namespace kvq::app::bench
