#pragma once
// Host side of a write or read: validates the tensors and fills the kernel descriptor. Plain C++
// (no CUDA call), so every refusal is unit-tested without a GPU (tests/cuda_nvfp4/
// write_plan_test.cpp). Messages say what was expected, what was found and which tensor.
#include "kernel_desc.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/status.h"
#include "kvq/layouts/nvfp4_descriptor.h"

namespace kvq::cuda_nvfp4 {

// The layout part of PageAddressing (everything but `items`), built once per writer/reader from
// the descriptor of an Nvfp4PageLayout, which already checked each side's scale arrangement
// against the geometry (ScaleArrangements::check). Refuses what the kernels cannot address: a page
// of 2^32 bytes or more, an arrangement this backend does not know.
Status make_page_addressing(const Nvfp4LayoutDesc& layout, PageAddressing* out);

// Validates `args` against the layout and the writer's device and fills everything in `desc`
// except counters and use_hw_e2m1 (the writer's own). On error `desc` is unspecified.
// Two groups a thread (desc.groups_per_thread = 2) when head_size / 16 is even, the input 16-bit
// and the write has at least bars.pair_min_items items; one side a thread (sides_per_thread = 1)
// for one-group writes of at most bars.split_max_items; streaming input loads for those and for
// one-group writes of at most bars.stream_max_items; the next kernel launched before the wait for
// one-side writes of at most bars.early_max_items (preload_write_kernels sets every bar).
//   key/value      [T, H, D] bf16|f16|f32 (same dtype), on `device`, last dim contiguous, data
//                  pointer and token/head strides 16-byte aligned (16-byte vector loads)
//   slot_mapping   [T] i64|i32 on `device`, contiguous
//   cache          [num_blocks, page_bytes] u8 on `device`, contiguous
//   k/v scale      host value finite and > 0, or a 4-byte aligned device pointer
Status plan_write(const WriteArgs& args, const Nvfp4LayoutDesc& layout,
                  const PageAddressing& addressing, Device device, const WriteSizeBars& bars,
                  WriteKernelDesc* desc, InputType* input);

//   cache, slot_mapping as above; key/value out [T, H, D] f32 on `device`, last dim contiguous,
//   16-byte aligned rows (16-byte vector stores); k/v scale finite and > 0.
Status plan_read(const ReadArgs& args, const Nvfp4LayoutDesc& layout,
                 const PageAddressing& addressing, Device device, ReadKernelDesc* desc);

}  // namespace kvq::cuda_nvfp4
