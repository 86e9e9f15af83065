#pragma once
// What the write and read kernels take: ONE plain struct each, built and validated on the host
// (write_plan.cpp), trusted by the device. No CUDA header: host-only code builds and unit-tests it.
//
// Work item = one (token, head, group) of both sides: 16 K elements + 16 V elements in, 2 x (8
// data bytes + 1 scale byte) out (the writer's threads take G consecutive items of a row). Items
// are numbered i = (token * H + head) * S + group, so the 32 lanes of a warp read consecutive
// 32-byte pieces of the input rows.
#include <cstdint>

#include "fast_divmod.h"
#include "kvq/abi/page.h"
#include "kvq/layouts/hd.h"
#include "write_kernel_table.h"

namespace kvq::cuda {

// What write kernels report without a sync, for take_out_of_range_slots(): per writer, on the
// device, zeroed once and never reset (a take reports how much the counts grew).
struct WriteCounters {
  unsigned long long out_of_range_slots;     // slots >= num_slots skipped, one count per token
  unsigned long long unusable_scale_tokens;  // tokens not written: a device scale of their
                                             // write broke kScaleRule (padding not counted)
  unsigned long long last_unusable_scale;    // (side << 32) | that scale's bits, the last seen
};

// Where one side's bytes of (token-in-page t, head h, group g) are inside a page: the page's
// affine maps (kvq/abi/page.h, the one definition of every offset) with the group's division by
// scale_group_div done by FastDivmod instead of a divide instruction.
struct SideAddressing {
  kvq_side_map map;
  FastDivmod group_div;  // map.scale_group_div

  KVQ_HD uint32_t data_offset(uint32_t t, uint32_t h, uint32_t g) const {
    return kvq_data_offset(&map, t, h) + 8u * g;
  }
  // The group part of the scale offset: a thread's group never changes, so kernels compute it
  // once per side.
  KVQ_HD uint32_t scale_group_term(uint32_t g) const {
    uint32_t q, r;
    group_div.divmod(g, q, r);
    return kvq_scale_group_term_qr(&map, q, r);
  }
  KVQ_HD uint32_t scale_offset(uint32_t t, uint32_t h, uint32_t group_term) const {
    return kvq_scale_offset_from_term(&map, t, h, group_term);
  }
};

// Page geometry shared by writer and reader: slot -> (page, token-in-page) and item numbering.
struct PageAddressing {
  uint64_t page_bytes;
  int64_t num_slots;      // num_blocks * block_size: slots >= this are out of range
  int64_t block_size;     // for the 64-bit path
  FastDivmod block_div;   // block_size, used when slots_fit_u31
  int32_t slots_fit_u31;  // num_slots <= 2^31: 32-bit slot division
  // Widest access (16, 8, 4, 2 or 1 bytes) every data run a thread stores or loads starts aligned
  // to: 8 * groups a thread at most (16 only for the writer's two-group units).
  int32_t data_access_bytes;
  FastDivmod groups_div;   // S = head_size / 16
  FastDivmod heads_div;    // H
  uint32_t items;          // num_tokens * H * S (< 2^31)
  SideAddressing side[2];  // 0 = K, 1 = V
};

enum class InputType : int32_t { bf16 = 0, f16 = 1, f32 = 2 };

struct ItemIndex {
  uint32_t token, head, group;
};

// The reader's item order: item = (token * H + head) * S + group.
KVQ_HD ItemIndex split_item(const PageAddressing& p, uint32_t item) {
  ItemIndex ix;
  uint32_t row;
  p.groups_div.divmod(item, row, ix.group);
  p.heads_div.divmod(row, ix.token, ix.head);
  return ix;
}

// Whether step 4's divisor sf * inv_global is normal and below 2^126 (where __frcp_rn needs no
// slow path; group_quantize.cuh) for every nonzero E4M3 scale sf, 2^-9 up to 448: the rounded
// products are monotone in sf, so the two ends decide. False for a NaN, infinite, zero or
// negative inv_global. The same IEEE float products on the host and the device.
KVQ_HD bool reciprocal_window_holds(float inv_global) {
  constexpr float kMinScale = 1.0f / 512.0f;     // smallest E4M3 subnormal
  constexpr float kMaxScale = 448.0f;            // largest E4M3 value
  constexpr float kMinNormal = 1.17549435e-38f;  // 2^-126
  constexpr float kTop = 8.50705917e37f;         // 2^126
  return inv_global * kMinScale >= kMinNormal && inv_global * kMaxScale < kTop;
}

// The block sizes of writes of more than one wave (wave_block_threads, below).
inline constexpr unsigned kWaveBlockThreads = 64;
inline constexpr unsigned kDenseWaveBlockThreads = 128;

// WriteKernelDesc::block_prefetch: how a block of the one-group grid of several waves asks for
// its inputs ahead of its threads' loads (plan_write says which holds for the write's strides).
enum BlockPrefetch : int32_t {
  kNoBlockPrefetch = 0,
  kBlockRun = 1,   // the block's items are one run of bytes a side: one request a side
  kTokenRuns = 2,  // a token's heads are back to back but tokens are not (a fused QKV view):
                   // one request a side for each token the block's items touch
};

// The part of a token that a block's items [begin, end) cover: items [token * H * S + offset,
// + items) of the write, one run of input bytes when a token's heads are back to back.
struct TokenRun {
  uint32_t token;
  uint32_t offset;  // in items (16-element groups) from the token's first
  uint32_t items;   // 0: the block touches fewer than j + 1 tokens
};

// The j-th token (from begin's) of the items [begin, end), end > begin. No product passes the
// last item's index, so 32-bit math holds for any write (items < 2^31).
KVQ_HD TokenRun block_token_run(const PageAddressing& p, uint32_t begin, uint32_t end, uint32_t j) {
  const uint32_t row = p.heads_div.divisor * p.groups_div.divisor;  // items a token: H * S
  const uint32_t first_token = split_item(p, begin).token;
  const uint32_t last_token = split_item(p, end - 1).token;
  if (j > last_token - first_token) return TokenRun{0, 0, 0};
  const uint32_t token = first_token + j;
  const uint32_t start = j == 0 ? begin : token * row;
  const uint32_t stop = token == last_token ? end : (token + 1) * row;
  return TokenRun{token, start - token * row, stop - start};
}

// The token of a block's first item (j = 0) or last (j = 1), for the block's items [begin, end),
// end > begin: threads 0 and 1 of a block of the one-group grid past one wave ask for these
// tokens' slot lines (write_kernel.cu, prefetch_block_inputs). Their two lines hold every slot
// of a block of up to 17 tokens (16 slots apart at most: 136 bytes of int64 slots, 8-byte
// aligned, so two lines).
KVQ_HD uint32_t block_edge_token(const PageAddressing& p, uint32_t begin, uint32_t end,
                                 uint32_t j) {
  return split_item(p, j == 0 ? begin : end - 1).token;
}

struct WriteKernelDesc {
  const void* src[2];       // key, value: [T, H, D], element strides below, last dim contiguous
  int64_t token_stride[2];  // in elements
  int64_t head_stride[2];   // in elements
  const void* slots;        // [T] int64 or int32
  int32_t slots_are_i64;
  int32_t use_hw_e2m1;  // sm_100 only, after the probe's check passed
  uint8_t* cache;       // [num_blocks, page_bytes]
  PageAddressing page;
  // k/v scales: from scale_ptr[s] on the device when non-null (read by the kernel, so a write can
  // sit in a CUDA graph), else global = 1 / scale and inv_global = 1 / global computed on the
  // host with the same IEEE float division.
  const float* scale_ptr[2];
  float global_scale[2];
  float inv_global_scale[2];
  // Per side, 1 where step 4 may skip __frcp_rn's range check and slow path: a host scale for
  // which reciprocal_window_holds(inv_global_scale), or a device scale (the kernel checks it).
  int32_t fast_reciprocal[2];
  WriteCounters* counters;  // the writer's, on the device
  // How items map to threads (plan_write picks, from the writer's WriteSizeBars):
  //   groups_per_thread  G: a thread covers groups [G*u, G*u + G) of one (token, head) row; 2 for
  //                      large writes with S even and 16-bit input, else 1
  //   sides_per_thread   2: K and V of its groups; 1 (with G = 1, writes too small to fill the
  //                      GPU): one side, warps 2w and 2w + 1 taking K and V of the same 32 items
  //   streaming_loads    1: inputs prefetched into L2 before the programmatic-launch wait and
  //                      loaded evict-first (ld.global.cs): one side a thread, and one-group
  //                      writes of at most stream_max_items; 0: the read-only path
  //   early_trigger      1: the next kernel may launch before this grid's programmatic-launch
  //                      wait rather than after it: one side a thread, writes of at most
  //                      early_max_items
  //   common_path        1: a one-wave write that needs none of the kernel's general paths runs
  //                      a kernel compiled without their run-time tests (common_path_holds)
  //   block_prefetch     a BlockPrefetch: one group and both sides a thread on the read-only
  //                      path (writes of more than one wave) and a token's heads back to back
  //                      (block_prefetch_for): a block brings its inputs into L2 with bulk
  //                      prefetches before the programmatic-launch wait, one a side (kBlockRun)
  //                      or one a side for each token it touches (kTokenRuns)
  int32_t groups_per_thread;
  int32_t sides_per_thread;
  int32_t streaming_loads;
  int32_t early_trigger;
  int32_t common_path;
  int32_t kernel;  // the row of kWriteKernels (write_kernel_table.h) these fields come from
  int32_t block_prefetch;
  // The two-group kernel's item order (split_write_item): rows (token, head) in runs of
  // 2^run_log2 consecutive tokens of one head for tokens [0, run_tokens), so that a warp's items
  // are one run and its page bytes land together in HND pages; the reader's (token, head) order
  // after that, and everywhere with run_log2 = run_tokens = 0 (plan_write says when). One-group
  // kernels always take the reader's order.
  uint32_t run_log2;
  uint32_t run_tokens;  // a multiple of 2^run_log2
  uint32_t pad_;        // 0: every byte of the descriptor is written (it is reused in place)
};

// Side s's input strides as the block prefetch and block size need them: a token's heads back to
// back (head stride D, or one head), and its tokens too ([T, H, D] dense, or one head of any
// head stride). A fused QKV view has the first without the second.
inline bool heads_back_to_back(const WriteKernelDesc& d, int s) {
  return d.page.heads_div.divisor == 1 ||
         d.head_stride[s] == int64_t{d.page.groups_div.divisor} * 16;
}
inline bool tokens_back_to_back(const WriteKernelDesc& d, int s) {
  const int64_t row = int64_t{d.page.heads_div.divisor} * d.page.groups_div.divisor * 16;
  return heads_back_to_back(d, s) && d.token_stride[s] == row;
}

// The block size of a write of more than one wave (write_launch_shape; plan_write's
// block_prefetch counts on it; the kernel reads blockDim): 128 threads where one group a thread
// reads K and V with their tokens back to back (tokens_back_to_back), else 64. A block of 128
// items spans two tokens of the main shape, and fused QKV views (tokens apart) and two-group
// writes measured slower with 128, so those keep 64 (docs/kernel-design.md, v26, v43).
inline unsigned wave_block_threads(const WriteKernelDesc& d) {
  const bool dense =
      d.groups_per_thread == 1 && tokens_back_to_back(d, 0) && tokens_back_to_back(d, 1);
  return dense ? kDenseWaveBlockThreads : kWaveBlockThreads;
}

// The writer's item order (run_log2 above): in a run, row = ((run * H + head) << run_log2) |
// token-in-run; after the runs, row = (token - run_tokens) * H + head. A bijection on
// [0, T * H * S) either way (WritePlanTest.WriterItemOrderIsABijection).
KVQ_HD ItemIndex split_write_item(const WriteKernelDesc& d, uint32_t item) {
  ItemIndex ix;
  uint32_t row;
  d.page.groups_div.divmod(item, row, ix.group);
  const uint32_t run_rows = d.run_tokens * d.page.heads_div.divisor;
  if (row < run_rows) {
    uint32_t run;
    d.page.heads_div.divmod(row >> d.run_log2, run, ix.head);
    ix.token = (run << d.run_log2) | (row & ((1u << d.run_log2) - 1u));
  } else {
    uint32_t t;
    d.page.heads_div.divmod(row - run_rows, t, ix.head);
    ix.token = d.run_tokens + t;
  }
  return ix;
}

// Whether a planned write runs the common-path kernel: a one-wave write of one group and both
// sides a thread with streaming loads (decode and the mid sizes up to one wave), both scales host
// values whose step-4 divisors stay in the reciprocal window (fast_reciprocal), a cache of at most
// 2^31 slots (32-bit slot division) and 8-byte aligned data runs. That kernel holds no
// device-scale load, no __frcp_rn slow path, no 64-bit slot division and no narrow stores, and
// none of the uniform tests that choose them. Only this mapping has one: the other mappings'
// common kernels measured slower, their warps waiting longer on their loads
// (docs/kernel-design.md, v35, v36).
KVQ_HD bool common_path_holds(const WriteKernelDesc& d) {
  return d.groups_per_thread == 1 && d.sides_per_thread == 2 && d.streaming_loads != 0 &&
         d.scale_ptr[0] == nullptr && d.scale_ptr[1] == nullptr && d.fast_reciprocal[0] != 0 &&
         d.fast_reciprocal[1] != 0 && d.page.slots_fit_u31 != 0 && d.page.data_access_bytes == 8;
}

struct ReadKernelDesc {
  const uint8_t* cache;
  const void* slots;      // [T] int64 or int32; < 0: zeros; >= num_slots: NaN (cannot be checked on
  int32_t slots_are_i64;  //   the host without a sync)
  int32_t pad_;
  float* dst[2];            // key, value out: [T, H, D] f32, last dim contiguous
  int64_t token_stride[2];  // in elements
  int64_t head_stride[2];
  float scale[2];  // k_scale, v_scale (dequantization scales)
  PageAddressing page;
};

}  // namespace kvq::cuda
