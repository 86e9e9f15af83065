#include "kvq/io/cache_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "kvq/core/kv_cache.h"
#include "kvq/core/scale_rule.h"
#include "kvq/core/status.h"
#include "kvq/io/config.h"

namespace kvq {
namespace {

constexpr const char* kCacheTensor = "kv_cache";

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

std::optional<float> recorded_scale(const SafetensorsFile& f, const char* key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  const std::string& text = it->second;
  // The config's grammar (parse_number): what kvq write records is what a config may say.
  const std::optional<double> number = parse_number(text);
  const float value = number ? static_cast<float>(*number) : 0.0f;
  // The writer's own rule (scale_rule.h, the same range as nvfp4_scale_usable), checked here so
  // that a bad recorded scale names this file and not the one a read takes its slots from
  // (load_cache_file has matched the config's format, nvfp4).
  if (!number || !scale_usable(value)) {
    bad(fmt::format("{}: __metadata__ {} = '{}': {}", f.source(), key, message_text(text),
                    kScaleRule));
  }
  return value;
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

CacheFile load_cache_file(const std::filesystem::path& file, const PageLayout& layout,
                          const std::string& config) {
  const SafetensorsFile f = SafetensorsFile::load(file);
  for (const auto& [key, want] : layout.metadata()) {
    const auto it = f.metadata().find(key);
    if (it == f.metadata().end()) {
      bad(
          fmt::format("{}: __metadata__ has no '{}': expected the layout description kvq write "
                      "records ({} = {} for {})",
                      f.source(), key, key, want, config));
    }
    if (it->second != want) {
      bad(
          fmt::format("{}: the cache's layout differs from {}: {} is {} in the cache, {} in the "
                      "config",
                      f.source(), config, key, message_text(it->second), want));
    }
  }
  const SafetensorsTensor& t = f.at(kCacheTensor);
  const std::array<int64_t, 2> shape = layout.cache_shape();
  const std::vector<int64_t> want(shape.begin(), shape.end());
  if (t.dtype != DType::u8 || t.shape != want) {
    bad(fmt::format("{}: tensor '{}': {} {}: expected U8 {} (num_blocks x page_bytes)", f.source(),
                    kCacheTensor, safetensors_dtype_name(t.dtype), shape_text(t.shape),
                    shape_text(want)));
  }
  CacheFile out;
  out.bytes.assign(t.bytes.begin(), t.bytes.end());
  out.k_scale = recorded_scale(f, "k_scale");
  out.v_scale = recorded_scale(f, "v_scale");
  return out;
}

std::vector<uint8_t> allocate_cache(const PageLayout& layout, const std::string& config) {
  std::vector<uint8_t> cache;
  if (try_resize(cache, layout.cache_bytes())) return cache;
  throw Error(
      ErrorCode::runtime,
      fmt::format("{}: a cache of {} bytes (cache.num_blocks {} x page_bytes {}) does not "
                  "fit in host memory",
                  config, layout.cache_bytes(), layout.geometry().num_blocks, layout.page_bytes()));
}

void save_cache_file(const std::filesystem::path& file, const PageLayout& layout,
                     std::vector<uint8_t>& bytes, float k_scale, float v_scale) {
  auto metadata = layout.metadata();
  metadata["k_scale"] = fmt::format("{}", k_scale);  // shortest text that reads back exactly
  metadata["v_scale"] = fmt::format("{}", v_scale);
  save_safetensors(file, {{kCacheTensor, cache_view(layout, bytes.data())}}, metadata);
}

std::optional<float> optional_scale(const SafetensorsFile& f, const char* name) {
  const SafetensorsTensor* t = f.find(name);
  if (t == nullptr) return std::nullopt;
  if (t->dtype != DType::f32 || t->numel() != 1 || t->shape.size() > 1) {
    bad(fmt::format("{}: tensor '{}': {} {}: expected F32 with shape [] or [1]", f.source(), name,
                    safetensors_dtype_name(t->dtype), shape_text(t->shape)));
  }
  float value;
  std::memcpy(&value, t->bytes.data(), sizeof value);
  return value;
}

}  // namespace kvq
