#pragma once
// Where every byte of a cache page lives. A format (layouts/) implements this; core knows only
// the shape of the answer. Offsets are relative to the start of a page; the cache is
// [num_blocks, page_bytes] uint8.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

// Unlike the writer and reader, a layout's methods are not noexcept: data_offset / scale_offset
// may throw kvq::Error (out_of_range) for an index outside the geometry, and a plugin's layout
// object is called directly by the host. That is safe only because the loader has checked that
// host and plugin share compiler family and C++ ABI (the build fingerprint); the host asks only
// for indices inside geometry(), and a plugin's own layout must not throw for those.
class BOOST_SYMBOL_VISIBLE PageLayout {
 public:
  virtual ~PageLayout() = default;

  virtual std::string format() const = 0;  // "nvfp4"
  virtual const PageGeometry& geometry() const = 0;
  virtual uint64_t page_bytes() const = 0;
  uint64_t cache_bytes() const {
    return page_bytes() * static_cast<uint64_t>(geometry().num_blocks);
  }
  // The cache tensor's shape: [num_blocks, page_bytes].
  std::array<int64_t, 2> cache_shape() const {
    return {geometry().num_blocks, static_cast<int64_t>(page_bytes())};
  }

  // A head row of head_size elements is split into groups() groups of group_size() elements; each
  // group has data_bytes_per_group() consecutive data bytes and one scale byte.
  virtual int64_t group_size() const = 0;
  int64_t groups() const { return geometry().head_size / group_size(); }
  virtual int64_t data_bytes_per_group() const = 0;

  // Byte offsets within a page of (side, token-in-page, head, group).
  virtual uint64_t data_offset(Side side, int64_t token, int64_t head, int64_t group) const = 0;
  virtual uint64_t scale_offset(Side side, int64_t token, int64_t head, int64_t group) const = 0;

  // The page as a list of regions, in address order, covering [0, page_bytes).
  virtual std::vector<Region> regions() const = 0;

  // Key/value strings that describe the layout fully (stored in safetensors __metadata__ and
  // compared by `kvq read` against the config).
  virtual std::map<std::string, std::string> metadata() const = 0;
};

}  // namespace kvq
