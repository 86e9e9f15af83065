// The per-element read kernel (fp8_e4m3, fp8_e5m2, bf16 pages -> f32 rows). One thread per item:
// kReadChunkElements (4) consecutive elements of a (token, head) row, K and V; it loads 4 codes a
// side (4 bytes of fp8, 8 of bf16), decodes them (element_codec.cuh, bit for bit
// ElementCodec::decode) and stores one 16-byte streaming float4 a side, so that a warp's store
// instruction writes 512 contiguous bytes of a row-contiguous output, as the NVFP4 reader's
// (docs/kernel-design.md). Padding slots read as zeros, slots past the cache as NaN (the reader
// cannot refuse them on the host without a sync).
#include <cuda_runtime.h>

#include "cuda_util.h"
#include "element_codec.cuh"
#include "element_kernels.h"
#include "slot_lookup.cuh"

namespace kvq::cuda {
namespace {

static_assert(kReadChunkElements == 4, "one float4 a side");

// n (<= 4) codes of `Format` at p: one 4- or 8-byte load where the chunk is whole and aligned
// (access), else code by code, byte by byte.
template <int Format>
__device__ __forceinline__ void load_codes(const uint8_t* p, uint32_t n, int access,
                                           uint32_t (&code)[4]) {
  constexpr int kBytes = Format == KVQ_FORMAT_BF16 ? 2 : 1;
  if (n == 4 && access >= 4 * kBytes) {
    if constexpr (kBytes == 1) {
      const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p));
#pragma unroll
      for (int e = 0; e < 4; ++e) code[e] = (w >> (8 * e)) & 0xFFu;
    } else {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(p));
      code[0] = w.x & 0xFFFFu;
      code[1] = w.x >> 16;
      code[2] = w.y & 0xFFFFu;
      code[3] = w.y >> 16;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    code[e] = 0;
    if (static_cast<uint32_t>(e) < n) {
      code[e] = __ldg(p + kBytes * e);
      if constexpr (kBytes == 2) code[e] |= static_cast<uint32_t>(__ldg(p + 2 * e + 1)) << 8;
    }
  }
}

// The first n (<= 4) values of v at p (16-byte aligned: rows are, and chunks are 16 bytes).
__device__ __forceinline__ void store_values(float* p, uint32_t n, const float (&v)[4]) {
  if (n == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (static_cast<uint32_t>(e) < n) p[e] = v[e];
  }
}

template <int Format>
__global__ void __launch_bounds__(kElementReadBlockThreads)
    element_read_kernel_of(const __grid_constant__ ElementReadDesc d) {
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= d.page.items) return;
  const ElementIndex ix = split_element_item(d.page, item);
  // The slot's line into L2 before the wait, as the NVFP4 reader (docs/kernel-design.md, v44r).
  const void* slot_at = slot_address(d.slots, d.slots_are_i64, ix.token);
  asm volatile("prefetch.global.L2 [%0];" ::"l"(slot_at));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t slot = load_slot_at(slot_at, d.slots_are_i64);

  const uint32_t n = chunk_length(d.page, ix.chunk);
  float* dst[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    int64_t element;
    if (d.output_offsets_u32) {
      element = static_cast<int64_t>(ix.token * static_cast<uint32_t>(d.token_stride[s]) +
                                     ix.head * static_cast<uint32_t>(d.head_stride[s]) +
                                     ix.chunk * kReadChunkElements);
    } else {
      element = static_cast<int64_t>(ix.token) * d.token_stride[s] +
                static_cast<int64_t>(ix.head) * d.head_stride[s] +
                static_cast<int64_t>(ix.chunk) * kReadChunkElements;
    }
    dst[s] = d.dst[s] + element;
  }
  if (slot < 0 || slot >= d.page.num_slots) {
    const float fill = slot < 0 ? 0.0f : __uint_as_float(0x7FC00000u);
    const float v[4] = {fill, fill, fill, fill};
    store_values(dst[0], n, v);
    store_values(dst[1], n, v);
    return;
  }
  uint64_t page_index;
  uint32_t t;
  split_slot(d.page, slot, page_index, t);
  const uint8_t* page = d.cache + page_index * d.page.page_bytes;
  uint32_t code[2][4];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    load_codes<Format>(page + chunk_offset(d.page, s, t, ix.head, ix.chunk), n,
                       d.page.data_access_bytes, code[s]);
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    float scale = 1.0f;
    if constexpr (Format != KVQ_FORMAT_BF16) {
      scale = d.head_scales[s] != nullptr ? __ldg(d.head_scales[s] + ix.head) : d.scale[s];
    }
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = decode_element<Format>(code[s][e], scale);
    store_values(dst[s], n, v);
  }
}

}  // namespace

const void* element_read_kernel(int32_t format) {
  switch (format) {
    case KVQ_FORMAT_FP8_E4M3:
      return reinterpret_cast<const void*>(element_read_kernel_of<KVQ_FORMAT_FP8_E4M3>);
    case KVQ_FORMAT_FP8_E5M2:
      return reinterpret_cast<const void*>(element_read_kernel_of<KVQ_FORMAT_FP8_E5M2>);
    case KVQ_FORMAT_BF16:
      return reinterpret_cast<const void*>(element_read_kernel_of<KVQ_FORMAT_BF16>);
    default: return nullptr;
  }
}

}  // namespace kvq::cuda
