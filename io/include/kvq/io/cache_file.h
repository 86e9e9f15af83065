#pragma once
// kvq's cache files: what `kvq write` writes (its --output, and its --cache to extend) and
// `kvq read` reads (its --cache), a safetensors file holding
//   kv_cache    [num_blocks, page_bytes] U8
//   __metadata__  the layout's metadata() (format, order, k_scales, v_scales, num_blocks,
//                 block_size, num_kv_heads, head_size, group_size, page_bytes) plus k_scale and
//                 v_scale, the dequantization scales the pages were written with.
// Both commands check the metadata against the config's layout, so a cache is never read or
// extended with a layout it was not written in.
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvq/core/export.h"
#include "kvq/core/page_layout.h"
#include "kvq/io/safetensors.h"

namespace kvq {

struct CacheFile {
  std::vector<uint8_t> bytes;    // [num_blocks, page_bytes]
  std::optional<float> k_scale;  // as recorded by kvq write (absent in files from elsewhere)
  std::optional<float> v_scale;
};

// Loads `file` and checks it against `layout` (from `config`, for messages). Throws kvq::Error
// (invalid_argument) naming the file and the first metadata field that differs, or the tensor.
KVQ_API CacheFile load_cache_file(const std::filesystem::path& file, const PageLayout& layout,
                                  const std::string& config);

// Resizes `v` to `n` zeroed elements; false (v unchanged) when host memory cannot hold them, so
// that the caller can say what did not fit.
template <class T>
bool try_resize(std::vector<T>& v, size_t n) {
  try {
    v.resize(n);
    return true;
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  return false;
}

// A cache of zeros in `layout`'s shape. Throws kvq::Error (runtime) giving its size when host
// memory cannot hold it.
KVQ_API std::vector<uint8_t> allocate_cache(const PageLayout& layout, const std::string& config);

KVQ_API void save_cache_file(const std::filesystem::path& file, const PageLayout& layout,
                             std::vector<uint8_t>& bytes, float k_scale, float v_scale);

// An optional F32 scalar (shape [] or [1]) named `name` in `f`; throws when it has another dtype
// or shape.
KVQ_API std::optional<float> optional_scale(const SafetensorsFile& f, const char* name);

// "[4, 8, 128]"
KVQ_API std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace kvq
