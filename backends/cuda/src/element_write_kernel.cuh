#pragma once
// The per-element write kernel (fp8_e4m3, fp8_e5m2, bf16 pages), instantiated per format by
// element_write_{fp8_e4m3,fp8_e5m2,bf16}.cu. One thread per item: one 16-byte chunk of page data
// of a (token, head) row, K and V (element_kernel_desc.h). A thread issues its two sides' 16-byte
// input loads (2 or 4 a side for fp8, 1 or 2 for bf16 pages) beside its slot load, converts, and
// stores one 16-byte streaming store a side. A warp's 32 chunks are consecutive pieces of the
// input rows and of the page rows: with D = 128 fp8, four rows, each one whole 128-byte line of
// its page. Every input byte is read once and every page byte written once; the write is a
// conversion stream bound by memory bandwidth, so the design is about bytes in flight (64 bytes
// a thread for bf16 -> fp8, at full occupancy) and a short per-thread path: no divide
// instruction (FastDivmod), 32-bit offsets inside a page and, where the inputs allow, in them.
//
// Programmatic dependent launch as the NVFP4 writer (docs/kernel-design.md): nothing the previous
// kernel on the stream may write is read before griddepcontrol.wait. Writes of at most one wave
// (streaming) prefetch their inputs and slot line into L2 before it and load evict-first.
#include <cuda_runtime.h>

#include <cstdint>

#include "element_codec.cuh"
#include "element_kernel_desc.h"
#include "element_kernels.h"
#include "kvq/core/scale_rule.h"
#include "slot_lookup.cuh"

namespace kvq::cuda {

// Blocks of 256 an SM must hold: a register budget of 64 (ptxas for sm_100a otherwise picks 32
// for some of these kernels and spills; -warn-spills makes that a build error).
inline constexpr int kElementWriteMinBlocks = 4;

// Keeps v in a register across the programmatic-launch wait (as write_kernel.cu's hold).
template <class T>
__device__ __forceinline__ void hold_value(T& v) {
  if constexpr (sizeof(T) == 8) {
    asm volatile("" : "+l"(v)::"memory");
  } else {
    asm volatile("" : "+r"(v)::"memory");
  }
}

// The first input element of chunk ix on `side`.
template <InputType In, int Format>
__device__ __forceinline__ const char* chunk_input(const ElementWriteDesc& d,
                                                   const ElementIndex& ix, int side) {
  constexpr int kElems = ChunkTraits<Format, In>::kElems;
  int64_t element;
  if (d.input_offsets_u32) {
    element = static_cast<int64_t>(ix.token * static_cast<uint32_t>(d.token_stride[side]) +
                                   ix.head * static_cast<uint32_t>(d.head_stride[side]) +
                                   ix.chunk * static_cast<uint32_t>(kElems));
  } else {
    element = static_cast<int64_t>(ix.token) * d.token_stride[side] +
              static_cast<int64_t>(ix.head) * d.head_stride[side] +
              static_cast<int64_t>(ix.chunk) * kElems;
  }
  return static_cast<const char*>(d.src[side]) + element * ChunkTraits<Format, In>::kElemBytes;
}

// One side's input words: whole 16-byte vectors for a full chunk (rows start 16-byte aligned:
// the contract), else element by element up to the row's end (n elements), the rest zero.
template <int Format, InputType In, bool kStream>
__device__ __forceinline__ void load_chunk(const char* p, uint32_t n,
                                           uint32_t (&w)[ChunkTraits<Format, In>::kWords]) {
  using Tr = ChunkTraits<Format, In>;
  if (n == static_cast<uint32_t>(Tr::kElems)) {
    const auto* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int k = 0; k < Tr::kVectors; ++k) {
      const uint4 x = kStream ? __ldcs(v + k) : __ldg(v + k);
      w[4 * k] = x.x;
      w[4 * k + 1] = x.y;
      w[4 * k + 2] = x.z;
      w[4 * k + 3] = x.w;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < Tr::kWords; ++k) w[k] = 0;
#pragma unroll
  for (int e = 0; e < Tr::kElems; ++e) {
    if (static_cast<uint32_t>(e) < n) {
      if constexpr (Tr::kElemBytes == 4) {
        w[e] = __ldg(reinterpret_cast<const unsigned int*>(p) + e);
      } else {
        w[e / 2] |= static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p) + e))
                    << (16 * (e & 1));
      }
    }
  }
}

// One side's page bytes: one 16-byte streaming store (page bytes are written once and not read
// back), or byte stores of the first `bytes` where the chunk is partial or the page rows are
// not 16-byte aligned (odd geometries, a cache pointer off alignment).
__device__ __forceinline__ void store_chunk(uint8_t* p, const uint32_t (&out)[4], uint32_t bytes,
                                            bool wide) {
  if (wide) {
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(out[0], out[1], out[2], out[3]));
    return;
  }
#pragma unroll
  for (int b = 0; b < 16; ++b) {
    if (static_cast<uint32_t>(b) < bytes) p[b] = static_cast<uint8_t>(out[b / 4] >> (8 * (b % 4)));
  }
}

// Whether every device scale of the write is usable (kvq/core/scale_rule.h). Per-head scales are
// checked by the whole block (each thread a few, then one barrier), so that a bad scale of any
// head stops every thread: the write writes nothing. Every thread of the block must call this.
__device__ __forceinline__ bool device_scales_usable(const ElementWriteDesc& d) {
  bool bad = false;
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    if (d.scale_ptr[s] != nullptr)
      bad |= !scale_bits_usable(__float_as_uint(__ldg(d.scale_ptr[s])));
  }
  if (d.has_head_scales) {
    const uint32_t heads = d.page.heads_div.divisor;
    for (uint32_t j = threadIdx.x; j < 2 * heads; j += blockDim.x) {
      // (No run-time index into the descriptor: that would copy it to local memory.)
      const float* base = j < heads ? d.head_scales[0] : d.head_scales[1];
      const uint32_t h = j < heads ? j : j - heads;
      if (base != nullptr) bad |= !scale_bits_usable(__float_as_uint(__ldg(base + h)));
    }
    bad = __syncthreads_or(bad) != 0;
  }
  return !bad;
}

// A write with an unusable device scale writes nothing; each of its tokens is counted once (by
// its head 0, chunk 0 thread) with the first bad value (K before V, heads in order), for
// take_out_of_range_slots; a token past the cache is counted as such, padding not at all.
__device__ __forceinline__ void report_unusable_scales(const ElementWriteDesc& d,
                                                       const ElementIndex& ix, int64_t slot) {
  if (ix.head != 0 || ix.chunk != 0 || slot < 0) return;
  if (slot >= d.page.num_slots) {
    atomicAdd(&d.counters->out_of_range_slots, 1ull);
    return;
  }
  unsigned long long found = 0;
#pragma unroll
  for (int s = 1; s >= 0; --s) {  // V first, so that K's (found last) wins
    if (d.head_scales[s] != nullptr) {
      for (uint32_t h = d.page.heads_div.divisor; h-- > 0;) {
        const uint32_t bits = __float_as_uint(__ldg(d.head_scales[s] + h));
        if (!scale_bits_usable(bits)) {
          found = (static_cast<unsigned long long>(h + 1) << kUnusableScaleHeadShift) |
                  (static_cast<unsigned long long>(s) << 32) | bits;
        }
      }
    } else if (d.scale_ptr[s] != nullptr) {
      const uint32_t bits = __float_as_uint(__ldg(d.scale_ptr[s]));
      if (!scale_bits_usable(bits)) found = (static_cast<unsigned long long>(s) << 32) | bits;
    }
  }
  atomicAdd(&d.counters->unusable_scale_tokens, 1ull);
  atomicExch(&d.counters->last_unusable_scale, found);
}

// The side's scale for head h: per head, one device value, or the host's.
__device__ __forceinline__ float side_scale(const ElementWriteDesc& d, int s, uint32_t h) {
  if (d.head_scales[s] != nullptr) return __ldg(d.head_scales[s] + h);
  if (d.scale_ptr[s] != nullptr) return __ldg(d.scale_ptr[s]);
  return d.scale[s];
}

template <int Format, InputType In, bool kStream>
__global__ void __launch_bounds__(kElementWriteMaxThreads, kElementWriteMinBlocks)
    element_write_kernel(const __grid_constant__ ElementWriteDesc d) {
  using Tr = ChunkTraits<Format, In>;
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = item < d.page.items;
  // The item's plan from the descriptor alone (no memory read), before the wait.
  ElementIndex ix{0, 0, 0};
  const char* src[2] = {nullptr, nullptr};
  const void* slot_at = d.slots;
  if (live) {
    ix = split_element_item(d.page, item);
#pragma unroll
    for (int s = 0; s < 2; ++s) src[s] = chunk_input<In, Format>(d, ix, s);
    slot_at = slot_address(d.slots, d.slots_are_i64, ix.token);
    if constexpr (kStream) {
      // Into L2 only (no data returns to the thread), so nothing stale is read: the loads after
      // the wait are the ones whose values count. A chunk's input may cross one line boundary;
      // its last byte is the row's last for a ragged chunk (nothing past the row is touched).
      const uint32_t last = chunk_length(d.page, ix.chunk) * Tr::kElemBytes - 1;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(src[s]));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(src[s] + last));
      }
      asm volatile("prefetch.global.L2 [%0];" ::"l"(slot_at));
    }
  }
  hold_value(ix.token);
  hold_value(ix.head);
  hold_value(ix.chunk);
  hold_value(src[0]);
  hold_value(src[1]);
  hold_value(slot_at);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");

  int64_t slot = -1;
  uint32_t n = 0;
  uint32_t w[2][Tr::kWords];
  if (live) {
    slot = load_slot_at(slot_at, d.slots_are_i64);
    n = chunk_length(d.page, ix.chunk);
#pragma unroll
    for (int s = 0; s < 2; ++s) load_chunk<Format, In, kStream>(src[s], n, w[s]);
  }
  if (d.device_scales && !device_scales_usable(d)) {  // uniform: every thread of the block
    if (live) report_unusable_scales(d, ix, slot);
    return;
  }
  if (!live || slot < 0) return;  // padding
  if (slot >= d.page.num_slots) {
    // Never written; counted once per token for take_out_of_range_slots.
    if (ix.head == 0 && ix.chunk == 0) atomicAdd(&d.counters->out_of_range_slots, 1ull);
    return;
  }
  uint32_t out[2][4];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const float scale = Format == KVQ_FORMAT_BF16 ? 1.0f : side_scale(d, s, ix.head);
    encode_chunk<Format, In>(w[s], scale, out[s]);
  }
  uint64_t page_index;
  uint32_t t;
  split_slot(d.page, slot, page_index, t);
  uint8_t* page = d.cache + page_index * d.page.page_bytes;
  const bool wide = n == static_cast<uint32_t>(Tr::kElems) && d.page.data_access_bytes >= 16;
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    store_chunk(page + chunk_offset(d.page, s, t, ix.head, ix.chunk), out[s], n * d.page.code_bytes,
                wide);
  }
}

// The kernel for (input, streaming) of one format.
template <int Format>
const void* element_write_entry(InputType input, bool streaming) {
  switch (input) {
    case InputType::bf16:
      return streaming ? reinterpret_cast<const void*>(
                             element_write_kernel<Format, InputType::bf16, true>)
                       : reinterpret_cast<const void*>(
                             element_write_kernel<Format, InputType::bf16, false>);
    case InputType::f16:
      return streaming
                 ? reinterpret_cast<const void*>(element_write_kernel<Format, InputType::f16, true>)
                 : reinterpret_cast<const void*>(
                       element_write_kernel<Format, InputType::f16, false>);
    case InputType::f32: break;
  }
  return streaming
             ? reinterpret_cast<const void*>(element_write_kernel<Format, InputType::f32, true>)
             : reinterpret_cast<const void*>(element_write_kernel<Format, InputType::f32, false>);
}

}  // namespace kvq::cuda
