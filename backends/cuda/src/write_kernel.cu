// The NVFP4 write kernel. One thread per "unit": G consecutive 16-element groups of one
// (token, head) row, of K and V together or (kSides = 1) of one of them; the unit's 16-byte
// loads are issued first. plan_write picks one row of kWriteKernels (write_kernel_table.h), one
// kernel each, by write size (WriteSizeBars):
//   - large writes, S even, 16-bit input: G = 2. The per-thread work (item split, slot load and
//     split, page pointer, scale addresses) is shared by 64 elements instead of 32;
//   - mid-size writes: G = 1, both sides. Twice the threads spread the same bytes over more SMs
//     and warps;
//   - writes too small to fill the GPU: G = 1, one side a thread. Such a write is bound by each
//     thread's chain of dependent instructions, which this halves (v6, v8).
// One-group writes of up to one wave (as many items as the one-group grid holds resident) prefetch
// their inputs and slots into L2 before the programmatic-launch wait (v12-v13, v18) and load them
// evict-first (v11); larger one-group writes prefetch a block's inputs with bulk requests before
// that wait, one a side (v39) or, for fused QKV views, one a side a token (v41); one-side writes of
// up to one block per SM let the next kernel launch before that wait (v13). The one-wave kernel of
// both sides a thread comes twice: for any write, and for the common case (common_path_holds,
// kernel_desc.h), compiled without the general paths' run-time tests (v36). A warp reads 32 x 32G
// consecutive bytes of each side it holds and writes whole 32-byte sectors of data rows; every byte
// is read once and written once (two groups a thread: the rows of padding and out-of-range slots
// are not read at all). The measurement behind each rule: docs/kernel-design.md, by its version
// tag.
#include <cuda_runtime.h>

#include <string>
#include <string_view>
#include <utility>

#include "cuda_util.h"
#include "group_quantize.cuh"
#include "input_groups.cuh"
#include "kvq/core/scale_rule.h"
#include "slot_lookup.cuh"
#include "write_kernel.h"

namespace kvq::cuda {
namespace {

constexpr int kMaxThreads = 256;
// Blocks of 256 an SM must hold (__launch_bounds__), i.e. the register budget: 48 registers for
// one 16-bit group a thread (5 blocks, as many warps as the SM's registers allow), 64 for two
// groups or f32 (4 blocks); no spills (ptxas -warn-spills is an error in this build).
template <InputType In, int G>
constexpr int kMinBlocks = G == 2 || In == InputType::f32 ? 4 : 5;

// The 8 data bytes of a group, with the widest access its address allows (8 in every realistic
// layout; odd geometries such as block_size 1 with head_size 80 leave V rows 2-byte aligned).
__device__ __forceinline__ void store_data(uint8_t* p, uint32_t w0, uint32_t w1, int access) {
  if (access >= 8) {
    // Streaming store: page bytes are written once and not read back by this kernel.
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(w0, w1));
  } else if (access == 4) {
    auto* q = reinterpret_cast<uint32_t*>(p);
    q[0] = w0;
    q[1] = w1;
  } else if (access == 2) {
    auto* q = reinterpret_cast<uint16_t*>(p);
    q[0] = static_cast<uint16_t>(w0);
    q[1] = static_cast<uint16_t>(w0 >> 16);
    q[2] = static_cast<uint16_t>(w1);
    q[3] = static_cast<uint16_t>(w1 >> 16);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      p[k] = static_cast<uint8_t>(w0 >> (8 * k));
      p[4 + k] = static_cast<uint8_t>(w1 >> (8 * k));
    }
  }
}

// Where a unit's inputs and slot are, from the descriptor alone (no memory read): most kernels
// make it before the programmatic-launch wait and hold it in registers across (see the kernel).
template <int kSides>
struct UnitPlan {
  ItemIndex ix;             // ix.group: the first of the G groups (a multiple of G)
  const char* src[kSides];  // [side - side0]: the first input element of the unit's groups
  const void* slot;         // its token's entry in the slot mapping
};

// The first input element of the unit's groups on `side`.
template <InputType In>
__device__ __forceinline__ const char* unit_input(const WriteKernelDesc& d, const ItemIndex& ix,
                                                  int side) {
  const int64_t element = static_cast<int64_t>(ix.token) * d.token_stride[side] +
                          static_cast<int64_t>(ix.head) * d.head_stride[side] +
                          static_cast<int64_t>(ix.group) * 16;
  return static_cast<const char*>(d.src[side]) + element * InputTraits<In>::kElementBytes;
}

// side0: the unit's first side, 0 when kSides == 2, else the thread's side.
template <InputType In, int G, int kSides>
__device__ __forceinline__ UnitPlan<kSides> plan_unit(const WriteKernelDesc& d, uint32_t item,
                                                      int side0) {
  UnitPlan<kSides> p;
  p.ix = G == 2 ? split_write_item(d, item) : split_item(d.page, item);  // runs: G = 2 only
#pragma unroll
  for (int s = 0; s < kSides; ++s) p.src[s] = unit_input<In>(d, p.ix, side0 + s);
  p.slot = slot_address(d.slots, d.slots_are_i64, p.ix.token);
  return p;
}

// Keeps v in a register across the programmatic-launch wait: an empty asm that "changes" v,
// ordered before the wait by its memory clobber, so the compiler can neither sink the arithmetic
// that made v below the wait nor recompute it there (it did both without this).
template <class T>
__device__ __forceinline__ void hold(T& v) {
  if constexpr (sizeof(T) == 8) {
    asm volatile("" : "+l"(v)::"memory");
  } else {
    asm volatile("" : "+r"(v)::"memory");
  }
}

template <int kSides>
__device__ __forceinline__ void hold(UnitPlan<kSides>& p) {
  hold(p.ix.token);
  hold(p.ix.head);
  hold(p.ix.group);
#pragma unroll
  for (int s = 0; s < kSides; ++s) hold(p.src[s]);
  hold(p.slot);
}

// One unit's inputs: the slot and G 16-byte-vector groups of each of its kSides sides, loaded
// before any is used.
template <InputType In, int G, int kSides>
struct Unit {
  int64_t slot;
  RawGroup<In> raw[kSides][G];  // [side - side0][group]
};

// Whether a unit's slot writes nothing: padding (negative), or past the cache (never written;
// counted once per token, by its first unit, for take_out_of_range_slots).
__device__ __forceinline__ bool writes_nothing(const WriteKernelDesc& d, const ItemIndex& ix,
                                               int side0, int64_t slot) {
  if (slot < 0) return true;
  if (slot >= d.page.num_slots) {
    if (ix.head == 0 && ix.group == 0 && side0 == 0) {
      atomicAdd(&d.counters->out_of_range_slots, 1ull);
    }
    return true;
  }
  return false;
}

// A device scale that breaks kScaleRule (the host checks its own): 0, a NaN or a subnormal
// would give NaN or saturated bytes, so the write writes nothing. Every thread of it returns
// before its stores: a thread holding both sides checks both, and one-side writes have both
// scales on the device (plan_write), each thread checking its partner's side too, so that neither
// side is written alone. Each token that would have been written is counted once, with the
// value, for take_out_of_range_slots; a token past the cache is counted as such, as
// writes_nothing counts it (two groups a thread: it already has, in load_unit).
__device__ __forceinline__ void report_unusable_scale(const WriteKernelDesc& d, const ItemIndex& ix,
                                                      int side0, int64_t slot, int side,
                                                      uint32_t bits) {
  if (ix.head != 0 || ix.group != 0 || side0 != 0 || slot < 0) return;
  if (slot >= d.page.num_slots) {
    atomicAdd(&d.counters->out_of_range_slots, 1ull);
    return;
  }
  atomicAdd(&d.counters->unusable_scale_tokens, 1ull);
  atomicExch(&d.counters->last_unusable_scale, static_cast<unsigned long long>(side) << 32 | bits);
}

// Loads the unit into *u; false when its slot writes nothing and the thread is done.
// Two groups a thread (the writes of many waves): the slot first, and no input read for a row
// that writes nothing. Such writes are bound by bandwidth, and an engine's padded batch (the
// bench's 5% padding) would otherwise read bytes it never stores; the slot's latency hides
// behind the other resident warps (docs/kernel-design.md, v27). One group a thread keeps its
// loads beside the slot load: there the dependent load lengthens every thread's chain, with too
// few waves to hide it in.
template <InputType In, int G, int kSides, bool kStream>
__device__ __forceinline__ bool load_unit(const WriteKernelDesc& d, const UnitPlan<kSides>& p,
                                          int side0, Unit<In, G, kSides>* u) {
  u->slot = load_slot_at(p.slot, d.slots_are_i64);
  if constexpr (G == 2) {
    if (writes_nothing(d, p.ix, side0, u->slot)) return false;
  }
#pragma unroll
  for (int s = 0; s < kSides; ++s) {
#pragma unroll
    for (int k = 0; k < G; ++k) {
      u->raw[s][k] = load_group<In, kStream>(p.src[s] + k * 16 * InputTraits<In>::kElementBytes);
    }
  }
  return true;
}

// Quantizes one unit and stores its bytes (one group a thread: nothing for padding, out-of-range
// slots counted; two groups: load_unit has done that). kCommon: d.common_path holds.
template <InputType In, bool kUseHwE2m1, int G, int kSides, bool kCommon>
__device__ __forceinline__ void write_unit(const WriteKernelDesc& d, const UnitPlan<kSides>& p,
                                           int side0, const Unit<In, G, kSides>& u,
                                           const float (&global)[kSides],
                                           const float (&inv_global)[kSides], bool fast_rcp) {
  // One group a thread: every side quantized before the slot is looked at, so the slot load's
  // latency hides behind the E2M1 work.
  QuantizedGroup q[kSides][G];
#pragma unroll
  for (int s = 0; s < kSides; ++s) {
#pragma unroll
    for (int k = 0; k < G; ++k) {
      q[s][k] = quantize_group16<In, kUseHwE2m1>(u.raw[s][k], global[s], inv_global[s], fast_rcp);
    }
  }
  if constexpr (G == 1) {
    if (writes_nothing(d, p.ix, side0, u.slot)) return;
  }
  uint64_t page_index;
  uint32_t t;
  split_slot<kCommon>(d.page, u.slot, page_index, t);
  uint8_t* page = d.cache + page_index * d.page.page_bytes;
  const int access = kCommon ? 8 * G : d.page.data_access_bytes;

#pragma unroll
  for (int s = 0; s < kSides; ++s) {
    const SideAddressing& a = d.page.side[side0 + s];
    uint8_t* data = page + a.data_offset(t, p.ix.head, p.ix.group);
    if (G == 2 && access >= 16) {
      __stcs(reinterpret_cast<uint4*>(data), make_uint4(q[s][0].data[0], q[s][0].data[1],
                                                        q[s][G - 1].data[0], q[s][G - 1].data[1]));
    } else {
#pragma unroll
      for (int k = 0; k < G; ++k) {
        store_data(data + 8 * k, q[s][k].data[0], q[s][k].data[1], access);
      }
    }
    uint32_t gq, gr;
    a.group_div.divmod(p.ix.group, gq, gr);
    const uint32_t off = a.scale_offset(t, p.ix.head, kvq_scale_group_term_qr(&a.map, gq, gr));
    if constexpr (G == 1) {
      page[off] = static_cast<uint8_t>(q[s][0].scale);
    } else {
      // Scale of g + 1 = scale of g + step: scale_gr inside a quotient block, else the jump to
      // the next block. Linear arrangements: step 1, so the pair is one 2-byte store.
      const uint32_t step =
          gr + 1 < a.group_div.divisor ? a.map.scale_gr : a.map.scale_gq - gr * a.map.scale_gr;
      if (step == 1 && (reinterpret_cast<uintptr_t>(page + off) & 1u) == 0) {
        *reinterpret_cast<uint16_t*>(page + off) =
            static_cast<uint16_t>(q[s][0].scale | (q[s][G - 1].scale << 8));
      } else {
        page[off] = static_cast<uint8_t>(q[s][0].scale);
        page[off + step] = static_cast<uint8_t>(q[s][G - 1].scale);
      }
    }
  }
}

// Asks the TMA unit to bring `items` groups of each side from ix's into L2: one
// cp.async.bulk.prefetch a side, one run of bytes, 16-byte aligned as every group is. A prefetch
// returns nothing to the thread and reads only the write's own inputs.
template <InputType In>
__device__ __forceinline__ void prefetch_inputs(const WriteKernelDesc& d, const ItemIndex& ix,
                                                uint32_t items) {
  constexpr uint32_t kGroupBytes = 16u * static_cast<uint32_t>(InputTraits<In>::kElementBytes);
#pragma unroll
  for (int side = 0; side < 2; ++side) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(unit_input<In>(d, ix, side)),
                 "r"(items * kGroupBytes)
                 : "memory");
  }
}

// A block's inputs and slot lines, as block_prefetch says: kBlockRun, thread 0 asks for all its
// items (values uniform across the block, so the compiler keeps them in uniform registers, as the
// bulk request takes them); kTokenRuns, thread j for the block's part of its j-th token (a block
// of n items touches at most n tokens). Only block_prefetch's own path runs: one shared path made
// the block-run address per-thread and every dense write slower (docs/kernel-design.md, v41).
//
// The slots matter as much as the inputs: every store waits on its token's slot, and with the
// inputs in L2 the slot's DRAM trip was the longest load left. Threads 0 and 1 ask for the lines
// of the block's first and last tokens' slots (block_edge_token), which hold every slot of a
// block of up to 17 tokens (wider blocks, 1x16 with 128 tokens a block, leave the lines between
// to their threads' own loads). docs/kernel-design.md, v44w.
template <InputType In>
__device__ __forceinline__ void prefetch_block_inputs(const WriteKernelDesc& d) {
  const uint32_t begin = blockIdx.x * blockDim.x;  // below d.page.items
  if (threadIdx.x < 2) {
    const uint32_t token =
        block_edge_token(d.page, begin, min(begin + blockDim.x, d.page.items), threadIdx.x);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(slot_address(d.slots, d.slots_are_i64, token)));
  }
  if (d.block_prefetch == kBlockRun) {
    if (threadIdx.x == 0) {
      prefetch_inputs<In>(d, split_item(d.page, begin), min(blockDim.x, d.page.items - begin));
    }
  } else if (d.block_prefetch == kTokenRuns) {
    const uint32_t end = min(begin + blockDim.x, d.page.items);
    const TokenRun run = block_token_run(d.page, begin, end, threadIdx.x);
    // A token's heads back to back: its item k starts 16 k elements after its first.
    if (run.items != 0) prefetch_inputs<In>(d, ItemIndex{run.token, 0, run.offset}, run.items);
  }
}

template <InputType In, bool kUseHwE2m1, int G, int kSides, bool kStream, bool kEarly, bool kCommon>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks<In, G>)
    nvfp4_write_kernel(const __grid_constant__ WriteKernelDesc d) {
  const uint32_t thread = blockIdx.x * blockDim.x + threadIdx.x;
  // The thread's first item and side. One side a thread: warp 2w takes K of items [32w, 32w+32),
  // warp 2w + 1 their V, so every warp still reads whole 32-byte pieces of one tensor.
  uint32_t item = thread * G;
  int side0 = 0;
  if constexpr (kSides == 1) {
    item = ((thread >> 6) << 5) | (thread & 31u);
    side0 = static_cast<int>((thread >> 5) & 1u);
  }
  if (item >= d.page.items) return;  // the host chose G so that it divides items

  // Programmatic dependent launch (launch_programmatic): this grid may start while the previous
  // kernel on the stream is still running; nothing it wrote (inputs, slots, scales, cache) is read
  // or written before the wait (an L2 prefetch is no read: it returns no data to this thread),
  // which returns when that kernel has finished and its writes are visible.
  //
  // The next kernel may launch once every block here has triggered; it waits for this grid in
  // turn. Triggered after the wait, its blocks take SMs as ours retire. Triggered before it
  // (kEarly: grids of at most one block per SM), a chain of small writes has three grids
  // resident at once, the next prefetching while this one waits for the one before. At two
  // blocks per SM it loses whether a third grid fits or not, so only up to
  // WriteSizeBars::early_max_items (docs/kernel-design.md, v13, v15).
  //
  // The unit's plan (item split, input and slot addresses) reads nothing, so it can be made
  // before the wait, while the previous kernel drains: after the wait a thread then issues its
  // loads at once (docs/kernel-design.md, v30). The one-group writes of several waves plan after
  // the wait: there ptxas hoists the wait above the plan anyway (no prefetch pins it), and the
  // reordered code measured slower.
  constexpr bool kPlanEarly = kStream || G == 2;
  UnitPlan<kSides> plan;
  if constexpr (kPlanEarly) {
    plan = plan_unit<In, G, kSides>(d, item, side0);
    if constexpr (kStream) {
      // Small writes: start the input reads from DRAM under the previous kernel's tail (in a
      // chain of writes, the write before). Only into L2, where every SM's writes land, so a line
      // fetched before the wait is never a stale copy of data that kernel writes; the loads after
      // the wait are the ones whose values count. Where that kernel made the inputs they are in
      // L2 already and this costs two instructions (docs/kernel-design.md, v12).
#pragma unroll
      for (int s = 0; s < kSides; ++s) asm volatile("prefetch.global.L2 [%0];" ::"l"(plan.src[s]));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(plan.slot));
    }
    hold(plan);
  }
  if constexpr (G == 1 && kSides == 2 && !kStream) {
    // Writes of more than one wave, where each thread plans after the wait (below): bulk requests
    // for the block's inputs start its reads ahead of the threads' own loads, and before the wait
    // (under the previous kernel's tail) in the first wave: one a side, or one a side a token
    // for fused QKV views (docs/kernel-design.md, v39, v41). A prefetch by each thread of its own
    // inputs, and one a wave ahead, measured slower (v19, v33).
    prefetch_block_inputs<In>(d);
  }
  if constexpr (kEarly) asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (!kEarly) asm volatile("griddepcontrol.launch_dependents;");
  if constexpr (!kPlanEarly) plan = plan_unit<In, G, kSides>(d, item, side0);

  // The unit's loads first: the scales' reciprocals below hold a call (the slow path of
  // __frcp_rn) that the compiler does not move loads across (docs/kernel-design.md, v6).
  Unit<In, G, kSides> u;
  if (!load_unit<In, G, kSides, kStream>(d, plan, side0, &u)) return;
  float global[kSides], inv_global[kSides];
  bool fast_rcp = true;  // kCommon: a constant, and step 4's __frcp_rn compiles away
#pragma unroll
  for (int s = 0; s < kSides; ++s) {
    const int side = side0 + s;
    if constexpr (!kCommon) {
      fast_rcp = fast_rcp && d.fast_reciprocal[side] != 0;  // host scales: decided by plan_write
    }
    if (!kCommon && d.scale_ptr[side] != nullptr) {
      const float scale = __ldg(d.scale_ptr[side]);
      const uint32_t bits = __float_as_uint(scale);
      const int other = 1 - side;
      const uint32_t other_bits = kSides == 1 ? __float_as_uint(__ldg(d.scale_ptr[other])) : bits;
      if (!scale_bits_usable(bits) || !scale_bits_usable(other_bits)) {
        const bool mine = !scale_bits_usable(bits);
        report_unusable_scale(d, plan.ix, side0, u.slot, mine ? side : other,
                              mine ? bits : other_bits);
        return;
      }
      global[s] = __frcp_rn(scale);  // nvfp4_global_scale: 1 / scale
      inv_global[s] = __frcp_rn(global[s]);
      fast_rcp = fast_rcp && reciprocal_window_holds(inv_global[s]);
    } else {
      global[s] = d.global_scale[side];
      inv_global[s] = d.inv_global_scale[side];
    }
  }
  write_unit<In, kUseHwE2m1, G, kSides, kCommon>(d, plan, side0, u, global, inv_global, fast_rcp);
}

template <class Kernel>
const void* as_entry(Kernel* k) {
  return reinterpret_cast<const void*>(k);
}

// The kernel of row I of kWriteKernels (write_kernel_table.h), for (input, hardware E2M1). f32
// input has no two-group kernel: two would hold 16 16-byte loads in flight per thread, past a
// 64-register budget (plan_write never picks it for f32).
template <InputType In, bool kUseHwE2m1, std::size_t I>
const void* kernel_of_row() {
  constexpr WriteKernelRow r = kWriteKernels[I];
  if constexpr (In == InputType::f32 && r.groups == 2) {
    return nullptr;
  } else {
    return as_entry(nvfp4_write_kernel<In, kUseHwE2m1, r.groups, r.sides, r.streaming,
                                       r.early_trigger, r.common>);
  }
}

// One kernel per row, instantiated from the table.
template <InputType In, bool kUseHwE2m1, std::size_t... I>
const void* kernel_at(int row, std::index_sequence<I...>) {
  const void* k = nullptr;
  (void)((row == static_cast<int>(I) ? (k = kernel_of_row<In, kUseHwE2m1, I>(), true) : false) ||
         ...);
  return k;
}

const void* write_kernel(InputType input, bool use_hw_e2m1, int row) {
  constexpr auto rows = std::make_index_sequence<kNumWriteKernels>{};
  switch (input) {
    case InputType::bf16:
      return use_hw_e2m1 ? kernel_at<InputType::bf16, true>(row, rows)
                         : kernel_at<InputType::bf16, false>(row, rows);
    case InputType::f16:
      return use_hw_e2m1 ? kernel_at<InputType::f16, true>(row, rows)
                         : kernel_at<InputType::f16, false>(row, rows);
    case InputType::f32: break;
  }
  return use_hw_e2m1 ? kernel_at<InputType::f32, true>(row, rows)
                     : kernel_at<InputType::f32, false>(row, rows);
}

// The row of kWriteKernels named `name` (for the occupancy questions below).
constexpr int row_named(std::string_view name) {
  for (int i = 0; i < kNumWriteKernels; ++i) {
    if (name == kWriteKernels[i].name) return i;
  }
  return -1;
}

// The threads of a 16-bit kernel the whole GPU holds at once (one wave), from its occupancy. The
// streaming bar below asks the common-path kernel; the general one is compiled under the same
// __launch_bounds__ with as many registers (48 on sm_90a; cuobjdump -res-usage).
cudaError_t resident_threads(bool use_hw_e2m1, int row, uint64_t sms, uint64_t* threads) {
  int blocks_per_sm = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks_per_sm, write_kernel(InputType::bf16, use_hw_e2m1, row), kMaxThreads, 0);
  *threads = static_cast<uint64_t>(blocks_per_sm) * kMaxThreads * sms;
  return err;
}

}  // namespace

LaunchShape blocks_of(uint64_t threads, unsigned block_threads) {
  LaunchShape s;
  s.threads = block_threads;
  s.blocks = static_cast<unsigned>((threads + block_threads - 1) / block_threads);
  return s;
}

LaunchShape launch_shape(uint64_t threads, int num_sms) {
  const bool small = num_sms > 0 && threads < static_cast<uint64_t>(num_sms) * kMaxThreads;
  return blocks_of(threads, small ? 128 : kMaxThreads);
}

LaunchShape write_launch_shape(const WriteKernelDesc& desc, int num_sms) {
  const uint64_t items = desc.page.items;
  if (desc.sides_per_thread == 1) return launch_shape(2 * ((items + 31) / 32 * 32), num_sms);
  const uint64_t threads = items / static_cast<uint32_t>(desc.groups_per_thread);
  if (desc.streaming_loads) return launch_shape(threads, num_sms);
  // More than one wave: small blocks (wave_block_threads: 64 or 128 threads). An SM frees a block's
  // slot only when all its warps are done; small blocks let the next ones start as soon as a few
  // warps finish, inside a wave and in the last one (docs/kernel-design.md, v26, v43). One-wave
  // (streaming) writes, whose blocks all start at once, lose with small blocks, so they keep
  // launch_shape's.
  return blocks_of(threads, wave_block_threads(desc));
}

Status launch_write(const WriteKernelDesc& desc, InputType input, const LaunchShape& shape,
                    CUstream_st* stream, int ordinal) noexcept {
  const void* kernel = write_kernel(input, desc.use_hw_e2m1 != 0, desc.kernel);
  return launch_programmatic("write kernel", kernel, &desc, sizeof desc, shape.blocks,
                             shape.threads, stream, ordinal);
}

int write_kernel_loadable(std::string* detail) noexcept {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(
      &attr, write_kernel(InputType::bf16, /*use_hw_e2m1=*/false, row_named("wave")));
  if (err == cudaSuccess) return cudaSuccess;
  (void)cudaGetLastError();
  if (detail) *detail = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  return err;
}

int preload_write_kernels(bool use_hw_e2m1, int num_sms, WriteSizeBars* bars) noexcept {
  for (InputType input : {InputType::bf16, InputType::f16, InputType::f32}) {
    for (int row = 0; row < kNumWriteKernels; ++row) {
      const void* kernel = write_kernel(input, use_hw_e2m1, row);
      if (kernel == nullptr) continue;  // f32 has no two-group kernel
      cudaFuncAttributes attr{};
      if (cudaError_t err = cudaFuncGetAttributes(&attr, kernel); err != cudaSuccess) {
        return err;
      }
    }
  }
  // Two groups a thread pay off once a write fills the GPU with them at least twice over: G = 1
  // is faster up to 2^19 items, G = 2 from 2^20 on (docs/kernel-design.md, v6, v28). With 132 SMs
  // holding 4 blocks of 256 two-group threads each, the bar sits at 540,672 items.
  const uint64_t sms = static_cast<uint64_t>(num_sms > 0 ? num_sms : 1);
  uint64_t pair_threads = 0;
  if (cudaError_t err = resident_threads(use_hw_e2m1, row_named("two_groups"), sms, &pair_threads);
      err != cudaSuccess) {
    return err;
  }
  bars->pair_min_items = 2 * 2 * pair_threads;  // items = 2 x threads; two waves of threads
  // One side a thread while the split grid is at most two blocks of 256 per SM: such a write is
  // bound by each thread's chain of dependent instructions, which splitting halves. At two blocks
  // per SM it loses: the SMs' issue slots already bound (docs/kernel-design.md, v8, v32).
  bars->split_max_items = sms * kMaxThreads;
  // Streaming (an L2 prefetch before the wait, then evict-first loads) while the one-group grid
  // is at most one wave: every block is resident at once, so in a chain of writes all of them
  // prefetch under the previous write. Past one wave the prefetch loses (blocks of later waves
  // start after the wait anyway), and evict-first loads lose in the two-group kernel (probably its
  // four 16-byte loads a thread returning to a line L2 has already let go) (docs/kernel-design.md,
  // v11, v12, v18). The 16-bit kernel's wave (5 blocks of 256 an SM: 168,960 items on 132 SMs;
  // f32's holds 4); one-group items = threads.
  if (cudaError_t err =
          resident_threads(use_hw_e2m1, row_named("stream_common"), sms, &bars->stream_max_items);
      err != cudaSuccess) {
    return err;
  }
  // The early trigger while the one-side grid is at most one block of 256 per SM (see the
  // kernel): items x 2 sides <= SMs x 256 threads.
  bars->early_max_items = sms * kMaxThreads / 2;
  return cudaSuccess;
}

}  // namespace kvq::cuda
