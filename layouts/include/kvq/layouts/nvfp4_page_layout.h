#pragma once
// The NVFP4 paged layout (docs/format.md, "The page"): page = [K side | V side], side =
// [data | scales], rows HND or NHD, each side's scales `linear` or `sm100_swizzled`.
// The constructor validates the CacheSpec and throws kvq::Error(invalid_argument) whose key()
// names the config key at fault ("cache.head_size", "cache.layout.v_scales", ...); after that,
// descriptor() is the plain struct kernels take.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvq/core/cache_spec.h"
#include "kvq/core/export.h"
#include "kvq/core/page_layout.h"
#include "kvq/layouts/nvfp4_descriptor.h"

namespace kvq {

class KVQ_API Nvfp4PageLayout final : public PageLayout {
 public:
  explicit Nvfp4PageLayout(const CacheSpec& spec);

  std::string format() const override { return "nvfp4"; }
  const PageGeometry& geometry() const override { return geometry_; }
  uint64_t page_bytes() const override { return desc_.page_bytes; }
  int64_t group_size() const override;
  int64_t data_bytes_per_group() const override;

  // Throw kvq::Error(out_of_range) naming the index when token, head or group is out of range.
  uint64_t data_offset(Side side, int64_t token, int64_t head, int64_t group) const override;
  uint64_t scale_offset(Side side, int64_t token, int64_t head, int64_t group) const override;

  // "K data", "K scales", "V data", "V scales" in address order.
  std::vector<Region> regions() const override;
  // format, order, k_scales, v_scales, num_blocks, block_size, num_kv_heads, head_size,
  // group_size, page_bytes (all as decimal strings / words).
  std::map<std::string, std::string> metadata() const override;

  const Nvfp4LayoutDesc& descriptor() const { return desc_; }

 private:
  void check_index(int64_t token, int64_t head, int64_t group) const;

  Nvfp4LayoutDesc desc_{};
  // Copied from desc_ at the end of the constructor and never written again: PageLayout's
  // geometry() returns a reference (plugins override it too), so it needs an object to refer to.
  PageGeometry geometry_;
};

// The words a config may use, for messages and `kvq layout`.
KVQ_API const char* order_name(Order order);
KVQ_API const char* scale_arrangement_name(ScaleArrangement arrangement);

}  // namespace kvq
