#pragma once
// The cache a writer writes: format, geometry, layout words and default scales. Plain data, the
// part of the YAML config that backends see (nothing in layouts/ or backends/ reads YAML).
// Format-specific words (format, scale arrangements) are checked by the layouts library, which
// names the key at fault in its kvq::Error so the config layer can point at FILE:LINE:COL.
#include <cstdint>
#include <string>

namespace kvq {

struct LayoutSpec {
  std::string order = "HND";  // HND (head-major) | NHD (token-major)
  // Scale arrangements (formats with a scale region: nvfp4). Empty: not given, the format's
  // default (nvfp4: linear K, sm100_swizzled V); given for a format without scales: refused.
  std::string k_scales;
  std::string v_scales;
};

struct CacheSpec {
  std::string format = "nvfp4";  // nvfp4 | fp8_e4m3 | fp8_e5m2 | bf16 (docs/format.md)
  int64_t num_blocks = 0;        // pages in the cache
  int64_t block_size = 16;       // tokens per page
  int64_t num_kv_heads = 0;
  int64_t head_size = 0;
  LayoutSpec layout;
  float k_scale = 1.0f;  // dequantization scales (NVFP4: amax / 2688, FP8: amax / 448; bf16: 1)
  float v_scale = 1.0f;
};

}  // namespace kvq
