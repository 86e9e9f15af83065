#pragma once
// Host side of a write or read: the kernel descriptor for arguments the host contract has passed
// (kvq/core/contract.h against write_requirements / read_requirements). Plain C++ (no CUDA call),
// so it is unit-tested without a GPU (tests/cuda/write_plan_test.cpp).
#include "kernel_desc.h"
#include "kvq/abi/plugin.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/status.h"

namespace kvq::cuda {

// What cuda needs beyond the contract, for a writer or reader on cuda:`ordinal`: every
// tensor there, head rows contiguous and 16-byte aligned (16-byte vector loads and stores),
// slots contiguous; slots and scales may be device values (counted and checked by the kernels),
// fp8 pages per-head scales too (the contract refuses them for other formats).
// Built once per writer or reader (which keeps it): no lookup on the write path.
kvq_requirements write_requirements(int ordinal);
inline kvq_requirements read_requirements(int ordinal) {
  return write_requirements(ordinal);
}

// The layout part of PageAddressing (everything but `items`), built once per writer/reader from
// the page descriptor. Refuses a format other than nvfp4 (key cache.format): the per-element
// formats have their own (element_plan.h).
Status make_page_addressing(const kvq_page_desc& page, PageAddressing* out);

// Fills everything in `desc` except counters and use_hw_e2m1 (the writer's own); refuses only a
// write of 2^31 work items or more. Two groups a thread (desc.groups_per_thread = 2) when
// head_size / 16 is even, the input 16-bit and the write has at least bars.pair_min_items items;
// one side a thread (sides_per_thread = 1) for one-group writes of at most bars.split_max_items;
// streaming input loads for those and for one-group writes of at most bars.stream_max_items; the
// next kernel launched before the wait for one-side writes of at most bars.early_max_items
// (preload_write_kernels sets every bar).
Status plan_write(const WriteArgs& args, const kvq_page_desc& page,
                  const PageAddressing& addressing, const WriteSizeBars& bars,
                  WriteKernelDesc* desc, InputType* input);

Status plan_read(const ReadArgs& args, const kvq_page_desc& page, const PageAddressing& addressing,
                 ReadKernelDesc* desc);

}  // namespace kvq::cuda
