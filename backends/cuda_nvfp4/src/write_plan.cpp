// Validation of write/read arguments and the kernel descriptors built from them.
#include "write_plan.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/layouts/nvfp4_scale_refusal.h"
#include "kvq/layouts/scale_arrangements.h"

namespace kvq::cuda_nvfp4 {
namespace {

constexpr uint64_t kVectorBytes =
    16;  // the kernels load/store input and output rows 16 B at a time

Status invalid(std::string message) {
  return {ErrorCode::invalid_argument, std::move(message)};
}

std::string pointer_text(const void* p) {
  return fmt::format("{:#x}", reinterpret_cast<uintptr_t>(p));
}

Status check_device(const TensorView& t, const char* name, Device device) {
  if (t.device != device) {
    return invalid(fmt::format("{} is on {}: expected {} (the cuda_nvfp4 writer's device)", name,
                               to_string(t.device), to_string(device)));
  }
  if (t.data == nullptr && t.numel() > 0) {
    return invalid(fmt::format("{} ({}) has a null data pointer", name, t.describe()));
  }
  return Status::ok();
}

Status check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> shape,
                   const char* dims) {
  bool same = t.ndim == static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    if (!same) break;
    same = t.shape[i++] == s;
  }
  if (!same) {
    std::string want;
    i = 0;
    for (int64_t s : shape) want += fmt::format("{}{}", i++ ? ", " : "", s);
    return invalid(
        fmt::format("{}: expected shape [{}] ({}), found {}", name, want, dims, t.describe()));
  }
  return Status::ok();
}

// [num_tokens, H, D]; num_tokens < 0: whatever the key has (the key itself).
Status check_kv_shape(const TensorView& t, const char* name, int64_t tokens,
                      const Nvfp4LayoutDesc& layout) {
  const bool ok = t.ndim == 3 && t.shape[1] == layout.num_heads && t.shape[2] == layout.head_size &&
                  (tokens < 0 ? t.shape[0] >= 0 : t.shape[0] == tokens);
  if (!ok) {
    return invalid(fmt::format(
        "{}: expected shape [num_tokens, num_kv_heads, head_size] = [{}, {}, {}], found {}", name,
        tokens < 0 ? std::string("*") : std::to_string(tokens), layout.num_heads, layout.head_size,
        t.describe()));
  }
  return Status::ok();
}

// [T, H, D] rows: last dim contiguous, non-negative strides, every row start 16-byte aligned.
Status check_rows(const TensorView& t, const char* name) {
  for (int i = 0; i < 3; ++i) {
    if (t.strides[i] < 0) {
      return invalid(fmt::format("{}: stride({}) = {}: expected >= 0 ({})", name, i, t.strides[i],
                                 t.describe()));
    }
  }
  if (t.strides[2] != 1) {
    return invalid(fmt::format(
        "{}: stride(2) = {}: the last dimension (head_size) must be contiguous (stride 1) for "
        "cuda_nvfp4's vector loads; make it contiguous first ({})",
        name, t.strides[2], t.describe()));
  }
  const auto esize = static_cast<uint64_t>(dtype_size(t.dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorBytes != 0) {
    return invalid(fmt::format(
        "{}: data pointer {} is not 16-byte aligned: cuda_nvfp4 moves head rows 16 bytes at a time",
        name, pointer_text(t.data)));
  }
  const char* dim_names[2] = {"token", "head"};
  for (int i = 0; i < 2; ++i) {
    if (t.shape[i] > 1 && (static_cast<uint64_t>(t.strides[i]) * esize) % kVectorBytes != 0) {
      return invalid(fmt::format(
          "{}: {} stride {} elements = {} bytes is not a multiple of 16: every head row must start "
          "16-byte aligned for cuda_nvfp4's vector loads",
          name, dim_names[i], t.strides[i], static_cast<uint64_t>(t.strides[i]) * esize));
    }
  }
  return Status::ok();
}

Status check_slots(const TensorView& s, int64_t tokens, Device device) {
  if (Status st = check_device(s, "slot_mapping", device); !st) return st;
  if (Status st = check_shape(s, "slot_mapping", {tokens}, "[num_tokens]"); !st) return st;
  if (s.dtype != DType::i64 && s.dtype != DType::i32) {
    return invalid(
        fmt::format("slot_mapping: expected dtype i64 or i32, found {}", dtype_name(s.dtype)));
  }
  if (tokens > 1 && s.strides[0] != 1) {
    return invalid(fmt::format("slot_mapping: expected a contiguous tensor, found stride(0) = {}",
                               s.strides[0]));
  }
  if (reinterpret_cast<uintptr_t>(s.data) % static_cast<uintptr_t>(dtype_size(s.dtype)) != 0) {
    return invalid(
        fmt::format("slot_mapping: data pointer {} is not aligned to its {}-byte elements",
                    pointer_text(s.data), dtype_size(s.dtype)));
  }
  return Status::ok();
}

Status check_cache(const TensorView& c, const Nvfp4LayoutDesc& layout, Device device) {
  if (Status st = check_device(c, "cache", device); !st) return st;
  if (Status st =
          check_shape(c, "cache", {layout.num_blocks, static_cast<int64_t>(layout.page_bytes)},
                      "[num_blocks, page_bytes]");
      !st) {
    return st;
  }
  if (c.dtype != DType::u8) {
    return invalid(fmt::format("cache: expected dtype u8, found {}", dtype_name(c.dtype)));
  }
  if (!c.is_contiguous()) {
    return invalid(fmt::format("cache: expected a contiguous tensor, found strides [{}, {}]",
                               c.strides[0], c.strides[1]));
  }
  return Status::ok();
}

// A buffer a kernel writes and one it reads: no byte in common (the same rule as reference_cpu).
Status check_separate(const TensorView& a, const char* a_name, const TensorView& b,
                      const char* b_name) {
  if (share_memory(a, b)) {
    return invalid(
        fmt::format("{} and {} share memory: expected separate buffers", a_name, b_name));
  }
  return Status::ok();
}

Status check_host_scale(float v, const char* name) {
  if (!nvfp4_scale_usable(v)) return invalid(nvfp4_scale_refusal(name, v));
  return Status::ok();
}

// The widest access (at most `widest`: 16, 8, 4, 2, 1 bytes) that every run of `widest` data
// bytes a thread handles starts aligned to. Runs start at data_base + (multiples of the row's
// head_size / 2 bytes) + 8 * g with g a multiple of widest / 8.
int32_t data_access_bytes(const void* cache, const Nvfp4LayoutDesc& layout, uint32_t widest) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(cache) | layout.page_bytes |
                        layout.side[0].data_base | layout.side[1].data_base |
                        static_cast<uint64_t>(layout.head_size / 2) | widest;
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
Status count_items(int64_t tokens, const Nvfp4LayoutDesc& layout, uint32_t* items) {
  // per_token < 2^29 (a page is < 2^32 bytes: make_page_addressing), so with tokens <= kMax the
  // product cannot overflow; no division on this per-write path.
  const int64_t per_token = layout.num_heads * layout.groups;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (tokens > kMax || static_cast<uint64_t>(tokens) * static_cast<uint64_t>(per_token) >
                           static_cast<uint64_t>(kMax)) {
    return invalid(fmt::format(
        "{} tokens x {} heads x {} groups = more than 2^31 work items in one call: split the batch",
        tokens, layout.num_heads, layout.groups));
  }
  *items = static_cast<uint32_t>(tokens * per_token);
  return Status::ok();
}

}  // namespace

Status make_page_addressing(const Nvfp4LayoutDesc& layout, PageAddressing* out) {
  if (layout.page_bytes >= (uint64_t{1} << 32)) {
    return invalid(fmt::format(
        "page_bytes {} >= 2^32: cuda_nvfp4 addresses a page with 32-bit offsets (block_size {} x "
        "num_kv_heads {} x head_size {} is too large)",
        layout.page_bytes, layout.block_size, layout.num_heads, layout.head_size));
  }
  if (layout.num_heads >= (int64_t{1} << 31) || layout.groups >= (int64_t{1} << 31) ||
      layout.block_size >= (int64_t{1} << 31)) {
    return invalid("num_kv_heads, head_size/16 and block_size must each be < 2^31");
  }
  PageAddressing p{};
  p.page_bytes = layout.page_bytes;
  p.block_size = layout.block_size;
  p.num_slots = layout.num_blocks * layout.block_size;  // fits: num_blocks * page_bytes did
  p.slots_fit_u31 = p.num_slots <= (int64_t{1} << 31) ? 1 : 0;
  p.block_div = FastDivmod::make(u32(layout.block_size));
  p.groups_div = FastDivmod::make(u32(layout.groups));
  p.heads_div = FastDivmod::make(u32(layout.num_heads));
  p.data_access_bytes = 8;
  const int64_t T = layout.block_size, H = layout.num_heads, S = layout.groups;
  const int64_t row_bytes = layout.head_size / 2;
  const bool hnd = layout.order == Order::HND;
  const int64_t scale_row_t = hnd ? S : H * S;  // scale bytes between tokens t and t+1
  const int64_t scale_row_h = hnd ? T * S : S;  // ... between heads h and h+1
  for (int s = 0; s < 2; ++s) {
    const Nvfp4SideDesc& sd = layout.side[s];
    SideAddressing& a = p.side[s];
    a.data_base = static_cast<uint32_t>(sd.data_base);
    a.data_t = u32(hnd ? row_bytes : H * row_bytes);
    a.data_h = u32(hnd ? T * row_bytes : row_bytes);
    a.scale_base = static_cast<uint32_t>(sd.scale_base);
    a.scale_h = u32(scale_row_h);
    switch (sd.scales) {
      case ScaleArrangement::linear:
        a.scale_t4 = u32(scale_row_t);
        a.scale_t1 = u32(scale_row_t);
        a.group_div = FastDivmod::make(u32(S));
        a.scale_gq = 0;
        a.scale_gr = 1;
        break;
      case ScaleArrangement::sm100_swizzled:
        // Its geometry passed Sm100SwizzledScales::check when the layout was built.
        a.scale_t4 = u32(scale_row_t);
        a.scale_t1 = 1;
        a.group_div = FastDivmod::make(u32(S / 4));
        a.scale_gq = u32(scale_row_t);
        a.scale_gr = 4;
        break;
      default:
        return invalid(fmt::format("scale arrangement '{}' (id {}) is not supported by cuda_nvfp4",
                                   ScaleArrangements::name_of(sd.scales),
                                   static_cast<int>(sd.scales)));
    }
  }
  *out = p;
  return Status::ok();
}

Status plan_write(const WriteArgs& args, const Nvfp4LayoutDesc& layout,
                  const PageAddressing& addressing, Device device, const WriteSizeBars& bars,
                  WriteKernelDesc* desc, InputType* input) {
  const TensorView* kv[2] = {&args.key, &args.value};
  const char* names[2] = {"key", "value"};
  const int64_t tokens = args.key.ndim == 3 ? args.key.shape[0] : -1;
  for (int s = 0; s < 2; ++s) {
    const TensorView& t = *kv[s];
    if (Status st = check_device(t, names[s], device); !st) return st;
    // The key sets num_tokens; the value must match it.
    if (Status st = check_kv_shape(t, names[s], s == 0 ? -1 : tokens, layout); !st) return st;
    if (t.dtype != DType::bf16 && t.dtype != DType::f16 && t.dtype != DType::f32) {
      return invalid(fmt::format("{}: expected dtype bf16, f16 or f32, found {}", names[s],
                                 dtype_name(t.dtype)));
    }
  }
  if (args.value.dtype != args.key.dtype) {
    return invalid(fmt::format("value: dtype {} differs from key's {}: both must be the same",
                               dtype_name(args.value.dtype), dtype_name(args.key.dtype)));
  }
  if (Status st = check_slots(args.slot_mapping, tokens, device); !st) return st;
  if (Status st = check_cache(args.cache, layout, device); !st) return st;
  const float host_scales[2] = {args.k_scale, args.v_scale};
  const float* scale_ptrs[2] = {args.k_scale_ptr, args.v_scale_ptr};
  const char* scale_names[2] = {"k_scale", "v_scale"};
  for (int s = 0; s < 2; ++s) {
    if (scale_ptrs[s] == nullptr) {
      if (Status st = check_host_scale(host_scales[s], scale_names[s]); !st) return st;
    } else if (reinterpret_cast<uintptr_t>(scale_ptrs[s]) % alignof(float) != 0) {
      return invalid(fmt::format("{}_ptr {} is not 4-byte aligned: expected one f32 on {}",
                                 scale_names[s], pointer_text(scale_ptrs[s]), to_string(device)));
    }
  }
  uint32_t items = 0;
  if (Status st = count_items(tokens, layout, &items); !st) return st;
  if (items > 0) {
    for (int s = 0; s < 2; ++s) {
      if (Status st = check_rows(*kv[s], names[s]); !st) return st;
      // The cache is written while the inputs are read.
      if (Status st = check_separate(*kv[s], names[s], args.cache, "cache"); !st) return st;
    }
    if (Status st = check_separate(args.slot_mapping, "slot_mapping", args.cache, "cache"); !st) {
      return st;
    }
    const char* ptr_names[2] = {"k_scale_ptr", "v_scale_ptr"};
    for (int s = 0; s < 2; ++s) {  // device scales are read (__ldg) while the cache is written
      if (scale_ptrs[s] == nullptr) continue;
      const TensorView scale =
          make_view(const_cast<float*>(scale_ptrs[s]), DType::f32, {1}, device);
      if (Status st = check_separate(scale, ptr_names[s], args.cache, "cache"); !st) return st;
    }
  }

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
  // Two groups a thread share the per-thread work (write_kernel.cu); f32 and small writes keep
  // one. Writes too small to fill the GPU split each unit's sides over two threads.
  d.groups_per_thread =
      layout.groups % 2 == 0 && args.key.dtype != DType::f32 && items >= bars.pair_min_items ? 2
                                                                                             : 1;
  // One side a thread only where both scales are on the host or both on the device: a thread that
  // finds a bad device scale must know of its partner's too (write_kernel.cu).
  const bool scales_alike = (scale_ptrs[0] == nullptr) == (scale_ptrs[1] == nullptr);
  d.sides_per_thread =
      d.groups_per_thread == 1 && items <= bars.split_max_items && scales_alike ? 1 : 2;
  const bool small = d.sides_per_thread == 1 || items <= bars.stream_max_items;
  d.streaming_loads = d.groups_per_thread == 1 && small ? 1 : 0;
  d.early_trigger = d.sides_per_thread == 1 && items <= bars.early_max_items ? 1 : 0;
  d.page.data_access_bytes =
      data_access_bytes(args.cache.data, layout, 8u * static_cast<uint32_t>(d.groups_per_thread));
  d.common_path = common_path_holds(d) ? 1 : 0;
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
  const int64_t warp_rows = 64 / layout.groups;
  d.run_log2 = 0;
  d.run_tokens = 0;
  if (d.groups_per_thread == 2 && layout.order == Order::HND && layout.groups < 16 &&
      warp_rows * layout.groups == 64 && layout.num_heads >= warp_rows) {
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

Status plan_read(const ReadArgs& args, const Nvfp4LayoutDesc& layout,
                 const PageAddressing& addressing, Device device, ReadKernelDesc* desc) {
  const int64_t tokens = args.slot_mapping.ndim == 1 ? args.slot_mapping.shape[0] : -1;
  if (Status st = check_cache(args.cache, layout, device); !st) return st;
  if (tokens < 0) {
    return invalid(fmt::format("slot_mapping: expected shape [num_tokens], found {}",
                               args.slot_mapping.describe()));
  }
  if (Status st = check_slots(args.slot_mapping, tokens, device); !st) return st;
  const TensorView* kv[2] = {&args.key, &args.value};
  const char* names[2] = {"key", "value"};
  for (int s = 0; s < 2; ++s) {
    const TensorView& t = *kv[s];
    if (Status st = check_device(t, names[s], device); !st) return st;
    if (Status st = check_kv_shape(t, names[s], tokens, layout); !st) return st;
    if (t.dtype != DType::f32) {
      return invalid(fmt::format("{}: the reader writes f32: expected dtype f32, found {}",
                                 names[s], dtype_name(t.dtype)));
    }
  }
  if (Status st = check_host_scale(args.k_scale, "k_scale"); !st) return st;
  if (Status st = check_host_scale(args.v_scale, "v_scale"); !st) return st;
  uint32_t items = 0;
  if (Status st = count_items(tokens, layout, &items); !st) return st;
  if (items > 0) {
    for (int s = 0; s < 2; ++s) {
      const TensorView& t = *kv[s];
      if (Status st = check_rows(t, names[s]); !st) return st;
      if (t.elements_overlap()) {
        return invalid(fmt::format(
            "{}: strides [{}, {}, {}] give two elements the same memory: expected an output "
            "where every element has its own",
            names[s], t.strides[0], t.strides[1], t.strides[2]));
      }
      // The outputs are written while the cache and the slots are read.
      if (Status st = check_separate(t, names[s], args.cache, "cache"); !st) return st;
      if (Status st = check_separate(t, names[s], args.slot_mapping, "slot_mapping"); !st) {
        return st;
      }
    }
    if (Status st = check_separate(args.key, "key", args.value, "value"); !st) return st;
  }
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
  d.page.data_access_bytes = data_access_bytes(args.cache.data, layout, 8);
  return Status::ok();
}

}  // namespace kvq::cuda_nvfp4
