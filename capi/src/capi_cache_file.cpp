// Cache files through the io library (kvq/io/cache_file.h), as the kvq tool, so a file the package
// writes is byte for byte what `kvq write --output` writes, and `kvq read --cache` reads either.
#include <fmt/format.h>

#include <cstring>

#include "capi_objects.h"
#include "kvq/io/cache_file.h"

using kvq::capi::guard;
using kvq::capi::require;

namespace kvq::capi {
namespace {

// `t` as the host cache of `layout`: [num_blocks, page_bytes] u8, contiguous, in host memory.
TensorView host_cache(const DLTensor* t, const PageLayout& layout, const char* function) {
  require(t, function, "cache");
  TensorView v;
  try {
    v = from_dlpack(*t);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("cache: {}", e.what()));
  }
  const auto shape = layout.cache_shape();
  if (v.dtype != DType::u8 || v.ndim != 2 || v.shape[0] != shape[0] || v.shape[1] != shape[1] ||
      !v.is_contiguous() || v.device.is_cuda()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("cache: {}: expected [{}, {}] u8 cpu, contiguous (num_blocks x "
                            "page_bytes of the config)",
                            v.describe(), shape[0], shape[1]));
  }
  if (v.data == nullptr && layout.cache_bytes() != 0) {
    throw Error(ErrorCode::invalid_argument, "cache: data is NULL");
  }
  return v;
}

}  // namespace
}  // namespace kvq::capi

extern "C" {

kvq_capi_status kvq_capi_cache_file_save(const kvq_capi_config* cfg, const char* path,
                                         const DLTensor* cache, float k_scale, float v_scale) {
  return guard([&] {
    const char* fn = "kvq_capi_cache_file_save";
    require(cfg, fn, "cfg");
    require(path, fn, "path");
    const kvq::TensorView v = kvq::capi::host_cache(cache, *cfg->layout, fn);
    const auto* first = static_cast<const uint8_t*>(v.data);
    std::vector<uint8_t> bytes(first, first + cfg->layout->cache_bytes());
    kvq::save_cache_file(path, *cfg->layout, bytes, k_scale, v_scale);
  });
}

kvq_capi_status kvq_capi_cache_file_load(const kvq_capi_config* cfg, const char* path,
                                         const DLTensor* cache, float* k_scale,
                                         int32_t* has_k_scale, float* v_scale,
                                         int32_t* has_v_scale) {
  return guard([&] {
    const char* fn = "kvq_capi_cache_file_load";
    require(cfg, fn, "cfg");
    require(path, fn, "path");
    require(k_scale, fn, "k_scale");
    require(has_k_scale, fn, "has_k_scale");
    require(v_scale, fn, "v_scale");
    require(has_v_scale, fn, "has_v_scale");
    const kvq::TensorView v = kvq::capi::host_cache(cache, *cfg->layout, fn);
    const kvq::CacheFile f = kvq::load_cache_file(path, *cfg->layout, cfg->config.source);
    std::memcpy(v.data, f.bytes.data(), f.bytes.size());
    *has_k_scale = f.k_scale ? 1 : 0;
    *k_scale = f.k_scale.value_or(0.0f);
    *has_v_scale = f.v_scale ? 1 : 0;
    *v_scale = f.v_scale.value_or(0.0f);
  });
}

}  // extern "C"
