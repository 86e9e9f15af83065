#pragma once
// Guard bands: the bytes a test puts just before and just after a cache, that no write may change
// ("writes never land outside the cache"). One report for every writer test, host or device:
//   [before | cache, cache_bytes | after]
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvq::test {

// "" when both bands hold what the test put there (`want_*`), else, for each band that changed,
// how many bytes did and the first and last of them as cache byte positions (negative: before
// the cache) and pages of `page_bytes`: "1 bytes of the guard band before the cache changed, from
// cache byte -1 (page -1, offset 4607) (got 0x00, expected 0x5a) to cache byte -1 (...)".
inline std::string guard_band_changes(std::span<const uint8_t> want_before,
                                      std::span<const uint8_t> got_before,
                                      std::span<const uint8_t> want_after,
                                      std::span<const uint8_t> got_after, size_t cache_bytes,
                                      size_t page_bytes) {
  const auto where = [&](int64_t pos) {
    const auto pb = static_cast<int64_t>(std::max<size_t>(page_bytes, 1));
    const int64_t page = pos >= 0 ? pos / pb : -((-pos + pb - 1) / pb);
    return fmt::format("cache byte {} (page {}, offset {})", pos, page, pos - page * pb);
  };
  std::string out;
  const auto check = [&](const char* name, std::span<const uint8_t> want,
                         std::span<const uint8_t> got, int64_t first_pos) {
    size_t count = 0, first = 0, last = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      if (count++ == 0) first = i;
      last = i;
    }
    if (count == 0) return;
    out += fmt::format(
        "{}{} bytes of the guard band {} the cache changed, from {} (got {:#04x}, expected "
        "{:#04x}) to {}",
        out.empty() ? "" : "; ", count, name, where(first_pos + static_cast<int64_t>(first)),
        got[first], want[first], where(first_pos + static_cast<int64_t>(last)));
  };
  check("before", want_before, got_before, -static_cast<int64_t>(want_before.size()));
  check("after", want_after, got_after, static_cast<int64_t>(cache_bytes));
  return out;
}

}  // namespace kvq::test
