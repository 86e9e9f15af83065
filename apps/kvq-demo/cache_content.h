#pragma once
// A cache's content per KV head, in an order that does not depend on the page layout or on how
// the heads are split into shards: what lets `--tensor-parallel N` be compared with N = 1 (each
// shard's cache has its own, smaller pages, so raw bytes cannot be compared directly).
//
// Head h's content, for block b = 0..num_blocks-1, side K then V, token t = 0..block_size-1,
// group g = 0..groups-1: the group's data_bytes_per_group() data bytes at data_offset(side, t, h,
// g) of page b, then its scale byte at scale_offset(side, t, h, g). The NVFP4 page has no padding
// (format doc: side_bytes = H*T*D/2 + H*T*S), so the heads' contents together are every cache
// byte exactly once.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/page_layout.h"

namespace kvq::demo {

// Appends head `head`'s content (layout.cache_bytes() / num_kv_heads bytes) to `out`.
// `cache` is [num_blocks, page_bytes] bytes as `layout` describes.
void append_head_content(const PageLayout& layout, const uint8_t* cache, int64_t head,
                         std::vector<uint8_t>& out);

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// FNV-1a 64 of `bytes`, continuing from `hash` (kFnv1a64Offset to start).
uint64_t fnv1a64(const uint8_t* bytes, std::size_t size, uint64_t hash = kFnv1a64Offset);

// "0x" and 16 lower-case hex digits.
std::string hex64(uint64_t v);

}  // namespace kvq::demo
