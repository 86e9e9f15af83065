#include "tensor_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <ranges>
#include <string>

#include "kvq/core/status.h"
#include "kvq/io/config.h"

namespace kvq::demo {

void check_tensor_parallel(int64_t num_kv_heads, int64_t n) {
  if (n >= 1 && num_kv_heads % n == 0) return;
  const auto divides = [num_kv_heads](int64_t d) { return num_kv_heads % d == 0; };
  throw Error(ErrorCode::invalid_argument,
              fmt::format("--tensor-parallel {}: the {} KV heads (cache.num_kv_heads) cannot be "
                          "split into {} equal shards: expected one of {}",
                          n, num_kv_heads, n,
                          fmt::join(std::views::iota(int64_t{1}, num_kv_heads + 1) |
                                        std::views::filter(divides),
                                    ", ")));
}

std::vector<Device> parse_device_list(std::string_view list) {
  std::vector<Device> devices;
  std::size_t begin = 0;
  for (int index = 0;; ++index) {
    const std::size_t comma = list.find(',', begin);
    const std::string_view word = list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    int32_t ordinal = -1;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), ordinal);
    if (!word.empty() && ec == std::errc() && end == word.data() + word.size() && ordinal >= 0) {
      devices.push_back(Device::cuda(ordinal));
    } else if (const std::optional<Device> d = parse_device(word)) {
      devices.push_back(*d);
    } else {
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("--devices {}: entry {} is '{}': expected a CUDA ordinal (0, 1, ...), "
                      "cuda:N or cpu",
                      message_text(list, 256), index, message_text(word)));
    }
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return devices;
}

std::vector<Device> shard_devices(int64_t n, Device first, const std::vector<Device>& listed) {
  if (!listed.empty()) {
    if (static_cast<int64_t>(listed.size()) != n) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("--devices: {} device{} for --tensor-parallel {}: expected one per "
                              "shard",
                              listed.size(), listed.size() == 1 ? "" : "s", n));
    }
    return listed;
  }
  std::vector<Device> devices;
  for (int64_t i = 0; i < n; ++i) {
    devices.push_back(first.is_cuda() ? Device::cuda(first.index + static_cast<int32_t>(i))
                                      : first);
  }
  return devices;
}

}  // namespace kvq::demo
