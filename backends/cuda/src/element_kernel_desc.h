#pragma once
// What the per-element write and read kernels take (fp8_e4m3, fp8_e5m2 and bf16 pages: one code
// per element, no scale region; kvq/layouts/element_quantize.h): one plain struct each, built and
// validated on the host (element_plan.cpp), trusted by the device. No CUDA header: host-only code
// builds and unit-tests it.
//
// Work item = one chunk of a (token, head) row, both sides. A chunk is kChunkBytes of page data
// for the writer (16 fp8 or 8 bf16 elements: one 16-byte store a side) and kReadChunkElements
// elements for the reader (one float4 store a side). Items are numbered
// i = (token * H + head) * C + chunk, C = ceil(head_size / chunk elements), so a warp's lanes read
// consecutive 16-byte vectors of the input rows and write consecutive 16-byte pieces of the page
// rows. The last chunk of a row is partial where head_size is not a multiple of the chunk.
#include <cstdint>

#include "fast_divmod.h"
#include "kernel_desc.h"
#include "kvq/abi/page.h"
#include "kvq/layouts/hd.h"

namespace kvq::cuda {

inline constexpr uint32_t kChunkBytes = 16;        // page bytes a writer thread stores a side
inline constexpr uint32_t kReadChunkElements = 4;  // elements a reader thread stores a side

// Page elements in a writer's chunk: 16 fp8 codes or 8 bf16 codes.
KVQ_HD uint32_t chunk_elements(int32_t format) {
  return format == KVQ_FORMAT_BF16 ? kChunkBytes / 2 : kChunkBytes;
}

KVQ_HD bool is_element_format(int32_t format) {
  return format == KVQ_FORMAT_FP8_E4M3 || format == KVQ_FORMAT_FP8_E5M2 ||
         format == KVQ_FORMAT_BF16;
}

// Page geometry of a per-element cache, for writer and reader: slot -> (page, token-in-page),
// item -> (token, head, chunk), and each side's data rows.
struct ElementPage {
  uint64_t page_bytes;
  int64_t num_slots;      // num_blocks * block_size: slots >= this are out of range
  int64_t block_size;     // for the 64-bit path
  FastDivmod block_div;   // block_size, used when slots_fit_u31
  int32_t slots_fit_u31;  // num_slots <= 2^31: 32-bit slot division
  // Widest access (16, 8, 4, 2 or 1 bytes) every page chunk starts aligned to: the cache pointer,
  // page_bytes, both data bases and the row bytes, capped at the chunk's bytes (plan).
  int32_t data_access_bytes;
  uint32_t head_size;     // D: the last chunk of a row holds D - (C - 1) * chunk elements
  uint32_t chunk_elems;   // elements a chunk
  FastDivmod chunks_div;  // C = ceil(D / chunk_elems)
  FastDivmod heads_div;   // H
  uint32_t items;         // num_tokens * H * C (< 2^31)
  uint32_t code_bytes;    // 1 (fp8) or 2 (bf16)
  kvq_side_map side[2];   // 0 = K, 1 = V: the page's data maps (kvq/abi/page.h)
};

struct ElementIndex {
  uint32_t token, head, chunk;
};

KVQ_HD ElementIndex split_element_item(const ElementPage& p, uint32_t item) {
  ElementIndex ix;
  uint32_t row;
  p.chunks_div.divmod(item, row, ix.chunk);
  p.heads_div.divmod(row, ix.token, ix.head);
  return ix;
}

// Elements of chunk c of a row: chunk_elems, or fewer for the last chunk of a ragged row.
KVQ_HD uint32_t chunk_length(const ElementPage& p, uint32_t chunk) {
  const uint32_t rest = p.head_size - chunk * p.chunk_elems;
  return rest < p.chunk_elems ? rest : p.chunk_elems;
}

// Page byte offset of chunk c of row (t, h) on side s (inside the page).
KVQ_HD uint32_t chunk_offset(const ElementPage& p, int side, uint32_t t, uint32_t h, uint32_t c) {
  return kvq_data_offset(&p.side[side], t, h) + c * p.chunk_elems * p.code_bytes;
}

// WriteCounters::last_unusable_scale for a per-head scale: (head + 1) << 33 | side << 32 | bits.
// The NVFP4 kernels leave the head part 0 (a per-tensor scale: *k_scale_ptr, *v_scale_ptr).
inline constexpr int kUnusableScaleHeadShift = 33;

struct ElementWriteDesc {
  const void* src[2];       // key, value: [T, H, D], element strides below, last dim contiguous
  int64_t token_stride[2];  // in elements
  int64_t head_stride[2];   // in elements
  const void* slots;        // [T] int64 or int32
  int32_t slots_are_i64;
  // 1: every input element offset (token * token_stride + head * head_stride + d) is below 2^31,
  // so the kernel computes it in 32 bits.
  int32_t input_offsets_u32;
  uint8_t* cache;  // [num_blocks, page_bytes]
  ElementPage page;
  // Dequantization scales a side, x / s encoded (fp8; bf16 pages take none: scale 1): the host
  // value scale[s], or one f32 at scale_ptr[s], or [H] f32 at head_scales[s] (device; the kernel
  // checks device values against kvq/core/scale_rule.h).
  float scale[2];
  const float* scale_ptr[2];
  const float* head_scales[2];
  int32_t device_scales;  // any of the pointers above is set
  int32_t has_head_scales;
  WriteCounters* counters;  // the writer's, on the device
  // 1: at most one wave (ElementWriteBars::stream_max_items): inputs and slots are prefetched
  // into L2 before the programmatic-launch wait, and loaded evict-first.
  int32_t streaming;
  int32_t format;  // enum kvq_format: which kernel runs it (the writer's page format)
};

struct ElementReadDesc {
  int32_t format;  // enum kvq_format: which kernel runs it (the reader's page format)
  int32_t pad_;    // 0: every byte of the descriptor is written
  const uint8_t* cache;
  const void* slots;  // [T] int64 or int32; < 0: zeros; >= num_slots: NaN
  int32_t slots_are_i64;
  int32_t output_offsets_u32;  // as ElementWriteDesc::input_offsets_u32, for the outputs
  float* dst[2];               // key, value out: [T, H, D] f32, last dim contiguous
  int64_t token_stride[2];     // in elements
  int64_t head_stride[2];
  float scale[2];               // host k_scale, v_scale (1 for bf16 pages)
  const float* head_scales[2];  // or [H] f32 on the device
  ElementPage page;
};

}  // namespace kvq::cuda
