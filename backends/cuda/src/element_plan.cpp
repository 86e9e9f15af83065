// The per-element kernels' descriptors from write/read arguments the host contract has passed:
// only what the kernels themselves limit is checked here.
#include "element_plan.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

namespace kvq::cuda {
namespace {

constexpr int64_t kMax31 = std::numeric_limits<int32_t>::max();

uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}

// Items = T * H * C with 32-bit index math in the kernels.
Status count_items(int64_t tokens, const ElementPage& p, uint32_t* items) {
  // per_token < 2^32 / chunk bytes (a page is < 2^32 bytes): no overflow with tokens <= kMax31.
  const int64_t per_token = int64_t{p.heads_div.divisor} * p.chunks_div.divisor;
  if (tokens > kMax31 || static_cast<uint64_t>(tokens) * static_cast<uint64_t>(per_token) >
                             static_cast<uint64_t>(kMax31)) {
    return {ErrorCode::invalid_argument,
            fmt::format("{} tokens x {} heads x {} chunks = more than 2^31 work items in one call: "
                        "split the batch",
                        tokens, p.heads_div.divisor, p.chunks_div.divisor)};
  }
  *items = static_cast<uint32_t>(tokens * per_token);
  return Status::ok();
}

// Whether every element offset of a [T, H, D] view with these strides is below 2^31 (the kernel
// then computes offsets in 32 bits). Strides are >= 0 (the contract).
bool offsets_fit_u31(int64_t tokens, int64_t heads, int64_t head_size, int64_t token_stride,
                     int64_t head_stride) {
  if (tokens == 0) return true;
  if (token_stride > kMax31 || head_stride > kMax31) return false;
  const uint64_t last = static_cast<uint64_t>(tokens - 1) * static_cast<uint64_t>(token_stride) +
                        static_cast<uint64_t>(heads - 1) * static_cast<uint64_t>(head_stride) +
                        static_cast<uint64_t>(head_size - 1);
  return last <= static_cast<uint64_t>(kMax31);
}

}  // namespace

Status make_element_page(const kvq_page_desc& page, uint32_t chunk_elems, ElementPage* out) {
  if (!is_element_format(page.format)) {
    return {ErrorCode::invalid_argument,
            fmt::format("the per-element kernels write fp8_e4m3, fp8_e5m2 and bf16 pages, not {}",
                        kvq_format_name(page.format)),
            "cache.format"};
  }
  // kvq_page_desc_init keeps a page below 2^32 bytes, so block_size, H and D are < 2^31 and fit
  // FastDivmod.
  ElementPage p{};
  p.page_bytes = page.page_bytes;
  p.block_size = page.block_size;
  p.num_slots = page.num_blocks * page.block_size;  // fits: num_blocks * page_bytes did
  p.slots_fit_u31 = p.num_slots <= (int64_t{1} << 31) ? 1 : 0;
  p.block_div = FastDivmod::make(u32(page.block_size));
  p.head_size = u32(page.head_size);
  p.chunk_elems = chunk_elems;
  p.chunks_div = FastDivmod::make(u32((page.head_size + chunk_elems - 1) / chunk_elems));
  p.heads_div = FastDivmod::make(u32(page.num_kv_heads));
  p.items = 0;
  p.code_bytes = page.elem_bits / 8;
  p.data_access_bytes = 1;
  p.side[0] = page.side[0];
  p.side[1] = page.side[1];
  *out = p;
  return Status::ok();
}

int32_t element_access_bytes(const void* cache, const kvq_page_desc& page, uint32_t widest) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(cache) | page.page_bytes |
                        page.side[0].data_base | page.side[1].data_base | page.row_bytes | widest;
  return static_cast<int32_t>(bits & (~bits + 1));  // lowest set bit
}

Status plan_element_write(const WriteArgs& args, const kvq_page_desc& page, const ElementPage& base,
                          const ElementWriteBars& bars, ElementWriteDesc* desc, InputType* input) {
  const TensorView* kv[2] = {&args.key, &args.value};
  const int64_t tokens = args.key.shape[0];
  ElementWriteDesc& d = *desc;  // every field, in place (no zeroing pass: every decode step)
  d.page = base;
  if (Status st = count_items(tokens, base, &d.page.items); !st) return st;
  d.page.data_access_bytes = element_access_bytes(args.cache.data, page, kChunkBytes);
  const float host[2] = {args.k_scale, args.v_scale};
  const float* ptrs[2] = {args.k_scale_ptr, args.v_scale_ptr};
  const TensorView* heads[2] = {&args.k_head_scales, &args.v_head_scales};
  bool fits = true;
  d.device_scales = 0;
  d.has_head_scales = 0;
  for (int s = 0; s < 2; ++s) {
    d.src[s] = kv[s]->data;
    d.token_stride[s] = kv[s]->strides[0];
    d.head_stride[s] = kv[s]->strides[1];
    fits = fits && offsets_fit_u31(tokens, page.num_kv_heads, page.head_size, d.token_stride[s],
                                   d.head_stride[s]);
    // bf16 pages are not scaled (the contract made sure nothing was given).
    const bool scaled = page.format != KVQ_FORMAT_BF16;
    d.scale[s] = scaled ? host[s] : 1.0f;
    d.scale_ptr[s] = scaled ? ptrs[s] : nullptr;
    d.head_scales[s] = scaled ? static_cast<const float*>(heads[s]->data) : nullptr;
    if (d.scale_ptr[s] != nullptr || d.head_scales[s] != nullptr) d.device_scales = 1;
    if (d.head_scales[s] != nullptr) d.has_head_scales = 1;
  }
  d.input_offsets_u32 = fits ? 1 : 0;
  d.slots = args.slot_mapping.data;
  d.slots_are_i64 = args.slot_mapping.dtype == DType::i64 ? 1 : 0;
  d.cache = static_cast<uint8_t*>(args.cache.data);
  d.counters = nullptr;
  d.streaming = d.page.items <= bars.stream_max_items ? 1 : 0;
  d.format = page.format;
  switch (args.key.dtype) {
    case DType::bf16: *input = InputType::bf16; break;
    case DType::f16: *input = InputType::f16; break;
    default: *input = InputType::f32; break;
  }
  return Status::ok();
}

Status plan_element_read(const ReadArgs& args, const kvq_page_desc& page, const ElementPage& base,
                         ElementReadDesc* desc) {
  const TensorView* kv[2] = {&args.key, &args.value};
  const int64_t tokens = args.slot_mapping.shape[0];
  ElementReadDesc& d = *desc;
  d.format = page.format;
  d.pad_ = 0;
  d.page = base;
  if (Status st = count_items(tokens, base, &d.page.items); !st) return st;
  d.page.data_access_bytes =
      element_access_bytes(args.cache.data, page, kReadChunkElements * base.code_bytes);
  d.cache = static_cast<const uint8_t*>(args.cache.data);
  d.slots = args.slot_mapping.data;
  d.slots_are_i64 = args.slot_mapping.dtype == DType::i64 ? 1 : 0;
  const float host[2] = {args.k_scale, args.v_scale};
  const TensorView* heads[2] = {&args.k_head_scales, &args.v_head_scales};
  bool fits = true;
  for (int s = 0; s < 2; ++s) {
    d.dst[s] = static_cast<float*>(kv[s]->data);
    d.token_stride[s] = kv[s]->strides[0];
    d.head_stride[s] = kv[s]->strides[1];
    fits = fits && offsets_fit_u31(tokens, page.num_kv_heads, page.head_size, d.token_stride[s],
                                   d.head_stride[s]);
    const bool scaled = page.format != KVQ_FORMAT_BF16;
    d.scale[s] = scaled ? host[s] : 1.0f;
    d.head_scales[s] = scaled ? static_cast<const float*>(heads[s]->data) : nullptr;
  }
  d.output_offsets_u32 = fits ? 1 : 0;
  return Status::ok();
}

}  // namespace kvq::cuda
