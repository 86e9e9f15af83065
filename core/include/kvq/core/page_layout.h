#pragma once
// Where every byte of a cache page lives, for host code: a value wrapping the page descriptor
// (kvq/abi/page.h), which is the one definition every backend, kernel and picture uses. Offsets
// are relative to the start of a page; the cache is [num_blocks, page_bytes] uint8.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvq/abi/page.h"
#include "kvq/core/cache_spec.h"
#include "kvq/core/export.h"

namespace kvq {

enum class Side : int32_t { k = 0, v = 1 };

struct PageGeometry {
  int64_t num_blocks = 0;
  int64_t block_size = 0;    // tokens per page (T)
  int64_t num_kv_heads = 0;  // H
  int64_t head_size = 0;     // D
};

// One contiguous byte range of a page: "K data", "K scales", ...
struct Region {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  std::string arrangement;  // "HND", "HND linear", "HND sm100_swizzled", ...
};

class KVQ_API PageLayout {
 public:
  // From a descriptor kvq_page_desc_init() filled.
  explicit PageLayout(const kvq_page_desc& desc);

  // Validates the spec's format, geometry and layout words and builds the layout. Throws
  // kvq::Error (invalid_argument) whose key() names the config key at fault ("cache.head_size",
  // "cache.layout.v_scales"), so the config layer can point at FILE:LINE:COL. The scales are
  // per write; from_spec checks only that a bf16 spec leaves them at 1.
  static PageLayout from_spec(const CacheSpec& spec);

  // The spec with the words from_spec chose: the format's default scale arrangements where the
  // spec names none, "none" for a format without scales (for reports and JSON).
  static CacheSpec resolved(const CacheSpec& spec);

  const kvq_page_desc& descriptor() const { return desc_; }
  std::string format() const;  // "nvfp4"
  const PageGeometry& geometry() const { return geometry_; }
  uint64_t page_bytes() const { return desc_.page_bytes; }
  uint64_t cache_bytes() const { return page_bytes() * static_cast<uint64_t>(desc_.num_blocks); }
  // The cache tensor's shape: [num_blocks, page_bytes].
  std::array<int64_t, 2> cache_shape() const {
    return {desc_.num_blocks, static_cast<int64_t>(page_bytes())};
  }

  // A head row of head_size elements is split into groups() groups of group_size() elements;
  // each group has data_bytes_per_group() consecutive data bytes and, where the format has
  // scales, one scale byte. Formats without scales count 16-element groups.
  int64_t group_size() const;
  int64_t groups() const { return desc_.head_size / group_size(); }
  int64_t data_bytes_per_group() const;
  bool has_scales() const { return desc_.group_size != 0; }

  // Byte offsets within a page of (side, token-in-page, head, group). Throw kvq::Error
  // (out_of_range) naming the index outside the geometry; scale_offset also for a format without
  // scales.
  uint64_t data_offset(Side side, int64_t token, int64_t head, int64_t group) const;
  uint64_t scale_offset(Side side, int64_t token, int64_t head, int64_t group) const;

  // The page as a list of regions, in address order, covering [0, page_bytes).
  std::vector<Region> regions() const;

  // Key/value strings that describe the layout fully (stored in safetensors __metadata__ and
  // compared by `kvq read` against the config): format, order, k_scales, v_scales, num_blocks,
  // block_size, num_kv_heads, head_size, group_size, page_bytes.
  std::map<std::string, std::string> metadata() const;

 private:
  void check_index(int64_t token, int64_t head, int64_t group) const;

  kvq_page_desc desc_{};
  PageGeometry geometry_;
};

// The cache.format words kvq knows, in table order: "nvfp4".
KVQ_API std::vector<std::string> known_formats();

}  // namespace kvq
