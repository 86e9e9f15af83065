// The kernel descriptors built from write/read arguments the host contract has passed
// (kvq/core/contract.h, with requirements() below): only what the kernels themselves limit is
// checked here.
#include "write_plan.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <string>

namespace kvq::cuda {
namespace {

Status invalid(std::string message) {
  return {ErrorCode::invalid_argument, std::move(message)};
}

// The kernels load and store input and output rows 16 bytes at a time.
constexpr uint32_t kVectorBytes = 16;

// The widest access (at most `widest`: 16, 8, 4, 2, 1 bytes) that every run of `widest` data
// bytes a thread handles starts aligned to. Runs start at data_base + (multiples of the row's
// head_size / 2 bytes) + 8 * g with g a multiple of widest / 8.
int32_t data_access_bytes(const void* cache, const kvq_page_desc& page, uint32_t widest) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(cache) | page.page_bytes |
                        page.side[0].data_base | page.side[1].data_base | page.row_bytes | widest;
  return static_cast<int32_t>(bits & (~bits + 1));  // lowest set bit
}

// How a block of one-group items (both sides) of a write of more than one wave asks for its
// inputs (block_prefetch): where a token's heads are back to back, its part of each token is one
// run of bytes a side (kTokenRuns), and its items are one run when the tokens are back to back too
// or no block spans two tokens (H * S a multiple of the block: kBlockRun). Heads apart: nothing.
BlockPrefetch block_prefetch_for(const WriteKernelDesc& d) {
  const bool whole_tokens =
      d.page.heads_div.divisor * d.page.groups_div.divisor % wave_block_threads(d) == 0;
  BlockPrefetch mode = kBlockRun;
  for (int s = 0; s < 2; ++s) {
    if (!heads_back_to_back(d, s)) return kNoBlockPrefetch;
    if (!tokens_back_to_back(d, s) && !whole_tokens) mode = kTokenRuns;
  }
  return mode;
}

uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}

// Items = T * H * S with 32-bit index math in the kernels.
Status count_items(int64_t tokens, const kvq_page_desc& page, uint32_t* items) {
  // per_token < 2^29 (a page is < 2^32 bytes), so with tokens <= kMax the product cannot
  // overflow; no division on this per-write path.
  const int64_t per_token = page.num_kv_heads * int64_t{page.groups};
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (tokens > kMax || static_cast<uint64_t>(tokens) * static_cast<uint64_t>(per_token) >
                           static_cast<uint64_t>(kMax)) {
    return invalid(fmt::format(
        "{} tokens x {} heads x {} groups = more than 2^31 work items in one call: split the batch",
        tokens, page.num_kv_heads, page.groups));
  }
  *items = static_cast<uint32_t>(tokens * per_token);
  return Status::ok();
}

}  // namespace

kvq_requirements write_requirements(int ordinal) {
  return kvq_requirements{
      sizeof(kvq_requirements),
      {kDLCUDA, ordinal},
      (1u << static_cast<uint32_t>(DType::bf16)) | (1u << static_cast<uint32_t>(DType::f16)) |
          (1u << static_cast<uint32_t>(DType::f32)),
      kVectorBytes,
      KVQ_REQ_LAST_DIM_CONTIGUOUS | KVQ_REQ_SLOTS_CONTIGUOUS | KVQ_REQ_DEVICE_SLOTS |
          KVQ_REQ_DEVICE_SCALES | KVQ_REQ_HEAD_SCALES,
  };
}

Status make_page_addressing(const kvq_page_desc& page, PageAddressing* out) {
  if (page.format != KVQ_FORMAT_NVFP4) {
    return {ErrorCode::invalid_argument,
            fmt::format("the NVFP4 kernels take nvfp4 pages, not {}", kvq_format_name(page.format)),
            "cache.format"};
  }
  // kvq_page_desc_init keeps a page below 2^32 bytes, so each size below is < 2^31 or the page
  // would not fit; FastDivmod needs divisors below 2^31.
  PageAddressing p{};
  p.page_bytes = page.page_bytes;
  p.block_size = page.block_size;
  p.num_slots = page.num_blocks * page.block_size;  // fits: num_blocks * page_bytes did
  p.slots_fit_u31 = p.num_slots <= (int64_t{1} << 31) ? 1 : 0;
  p.block_div = FastDivmod::make(u32(page.block_size));
  p.groups_div = FastDivmod::make(page.groups);
  p.heads_div = FastDivmod::make(u32(page.num_kv_heads));
  p.data_access_bytes = 8;
  for (int s = 0; s < 2; ++s) {
    p.side[s].map = page.side[s];
    p.side[s].group_div = FastDivmod::make(page.side[s].scale_group_div);
  }
  *out = p;
  return Status::ok();
}

Status plan_write(const WriteArgs& args, const kvq_page_desc& page,
                  const PageAddressing& addressing, const WriteSizeBars& bars,
                  WriteKernelDesc* desc, InputType* input) {
  const TensorView* kv[2] = {&args.key, &args.value};
  const int64_t tokens = args.key.shape[0];
  const float host_scales[2] = {args.k_scale, args.v_scale};
  const float* scale_ptrs[2] = {args.k_scale_ptr, args.v_scale_ptr};
  uint32_t items = 0;
  if (Status st = count_items(tokens, page, &items); !st) return st;

  // Filled in place, every field (no zeroing pass, no copy: this runs on every decode step).
  WriteKernelDesc& d = *desc;
  for (int s = 0; s < 2; ++s) {
    d.src[s] = kv[s]->data;
    d.token_stride[s] = kv[s]->strides[0];
    d.head_stride[s] = kv[s]->strides[1];
    d.scale_ptr[s] = scale_ptrs[s];
    d.global_scale[s] = 0.0f;
    d.inv_global_scale[s] = 0.0f;
    d.fast_reciprocal[s] = 1;
    if (scale_ptrs[s] == nullptr) {
      // nvfp4_global_scale and step 4's 1/global, with the same IEEE float division as the
      // device (and as reference_cpu).
      d.global_scale[s] = 1.0f / host_scales[s];
      d.inv_global_scale[s] = 1.0f / d.global_scale[s];
      d.fast_reciprocal[s] = reciprocal_window_holds(d.inv_global_scale[s]) ? 1 : 0;
    }
  }
  d.slots = args.slot_mapping.data;
  d.slots_are_i64 = args.slot_mapping.dtype == DType::i64 ? 1 : 0;
  d.use_hw_e2m1 = 0;
  d.cache = static_cast<uint8_t*>(args.cache.data);
  d.page = addressing;
  d.page.items = items;
  // The kernel: one row of kWriteKernels (write_kernel_table.h). Whether the stream mapping's
  // common case holds is asked of that mapping, so it is filled in first.
  const auto fill_mapping = [&](const WriteKernelRow& row) {
    d.groups_per_thread = row.groups;
    d.sides_per_thread = row.sides;
    d.streaming_loads = row.streaming ? 1 : 0;
    d.early_trigger = row.early_trigger ? 1 : 0;
    d.common_path = row.common ? 1 : 0;
    d.page.data_access_bytes =
        data_access_bytes(args.cache.data, page, 8u * static_cast<uint32_t>(row.groups));
  };
  fill_mapping(kWriteKernels[kStreamCommonRow]);
  WriteTraits traits{};
  traits.items = items;
  traits.pairs_possible = page.groups % 2 == 0 && args.key.dtype != DType::f32;
  traits.scales_alike = (scale_ptrs[0] == nullptr) == (scale_ptrs[1] == nullptr);
  traits.common_case_holds = common_path_holds(d);
  d.kernel = choose_write_kernel(traits, bars);
  fill_mapping(kWriteKernels[d.kernel]);
  d.block_prefetch = d.groups_per_thread == 1 && d.sides_per_thread == 2 && d.streaming_loads == 0
                         ? block_prefetch_for(d)
                         : kNoBlockPrefetch;
  // Token runs (split_write_item) where the reader's order scatters a two-group warp's stores:
  // in HND pages, when its 64 / S rows are as many different heads of one token (H >= 64 / S),
  // each row's 8S data bytes a part of a line in its own head's region (S < 16). A run of 64 / S
  // tokens of one head fills whole lines and one scale sector instead. Where the rows already
  // share lines (H = 4, D = 64 with 16 rows a warp, D = 256), and in the one-group kernels, the
  // runs' extra instructions cost more than they save, so those keep the reader's order
  // (docs/kernel-design.md, v22).
  const int64_t warp_rows = 64 / int64_t{page.groups};
  d.run_log2 = 0;
  d.run_tokens = 0;
  d.pad_ = 0;
  if (d.groups_per_thread == 2 && page.order == KVQ_ORDER_HND && page.groups < 16 &&
      warp_rows * page.groups == 64 && page.num_kv_heads >= warp_rows) {
    d.run_log2 = static_cast<uint32_t>(std::countr_zero(static_cast<uint64_t>(warp_rows)));
    d.run_tokens = static_cast<uint32_t>(tokens) >> d.run_log2 << d.run_log2;
  }
  d.counters = nullptr;
  switch (args.key.dtype) {
    case DType::bf16: *input = InputType::bf16; break;
    case DType::f16: *input = InputType::f16; break;
    default: *input = InputType::f32; break;
  }
  return Status::ok();
}

Status plan_read(const ReadArgs& args, const kvq_page_desc& page, const PageAddressing& addressing,
                 ReadKernelDesc* desc) {
  const TensorView* kv[2] = {&args.key, &args.value};
  uint32_t items = 0;
  if (Status st = count_items(args.slot_mapping.shape[0], page, &items); !st) return st;
  ReadKernelDesc& d = *desc;  // every field, in place
  d.pad_ = 0;
  d.cache = static_cast<const uint8_t*>(args.cache.data);
  d.slots = args.slot_mapping.data;
  d.slots_are_i64 = args.slot_mapping.dtype == DType::i64 ? 1 : 0;
  for (int s = 0; s < 2; ++s) {
    d.dst[s] = static_cast<float*>(kv[s]->data);
    d.token_stride[s] = kv[s]->strides[0];
    d.head_stride[s] = kv[s]->strides[1];
  }
  d.scale[0] = args.k_scale;
  d.scale[1] = args.v_scale;
  d.page = addressing;
  d.page.items = items;
  d.page.data_access_bytes = data_access_bytes(args.cache.data, page, 8);
  return Status::ok();
}

}  // namespace kvq::cuda
