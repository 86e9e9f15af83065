#pragma once
// The cache a writer writes: format, geometry, layout words and default scales. Plain data, the
// part of the YAML config that backends see (nothing in layouts/ or backends/ reads YAML).
// Format-specific words (format, scale arrangements) are checked by the layouts library, which
// names the key at fault in its kvq::Error so the config layer can point at FILE:LINE:COL.
#include <cstdint>
#include <string>

namespace kvq {

struct LayoutSpec {
  std::string order = "HND";                // HND (head-major) | NHD (token-major)
  std::string k_scales = "linear";          // scale arrangement of the K side
  std::string v_scales = "sm100_swizzled";  // scale arrangement of the V side
};

struct CacheSpec {
  std::string format = "nvfp4";
  int64_t num_blocks = 0;   // pages in the cache
  int64_t block_size = 16;  // tokens per page
  int64_t num_kv_heads = 0;
  int64_t head_size = 0;
  LayoutSpec layout;
  float k_scale = 1.0f;  // dequantization scales (NVFP4: amax / 2688); > 0, finite
  float v_scale = 1.0f;
};

}  // namespace kvq
