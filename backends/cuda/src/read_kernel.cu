// The NVFP4 read (dequantize) kernel: four threads per (token, head, group), K and V together.
// Thread q of a group dequantizes elements 4q..4q+3 of each side: 2 data bytes + 1 scale byte in
// (the group's other threads read the neighbouring bytes of the same sectors: L1 merges them),
// one 16-byte streaming store out. Consecutive threads store consecutive float4s, so one warp
// store instruction writes 512 contiguous bytes of a [T, H, D] output with contiguous rows (one
// thread per group, storing 4 x 16 bytes, had each warp store instruction touch 32 pieces spread
// over 2 KiB; docs/kernel-design.md).
// Every value is kvq::nvfp4_dequantize(code, scale, k_scale) -- the one definition every reader
// uses -- with its E2M1 decode done by byte permutes, so this reader agrees with the CPU one bit
// for bit (tests/cuda/gpu_reader_test.cpp reads every code and scale byte).
#include <cuda_runtime.h>

#include <string>

#include "cuda_util.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "slot_lookup.cuh"
#include "write_kernel.h"

namespace kvq::cuda {
namespace {

static_assert(kReadThreadsPerItem == 4, "the kernel splits a group of 16 into 4 x 4 values");

// 2 data bytes (4 codes, element 4q + j in bits [4j, 4j + 4)) at `p`, which is 2-byte aligned
// when access >= 2.
__device__ __forceinline__ uint32_t load_codes(const uint8_t* p, int access) {
  if (access >= 2) return __ldg(reinterpret_cast<const unsigned short*>(p));
  return static_cast<uint32_t>(__ldg(p)) | (static_cast<uint32_t>(__ldg(p + 1)) << 8);
}

// Four E2M1 codes (element j in bits [4j, 4j + 4) of `codes`) as floats, bit for bit
// kvq::e2m1_to_float. Every E2M1 value is exact in bf16, so each is two bytes, the rest zero, and
// byte permutes look them up: the magnitude m = code & 7 selects its exponent byte and the byte
// after from two 8-entry tables, and the sign bit joins the exponent byte. 13 instructions for 4
// values, against 7-9 a value for the arithmetic decode (docs/kernel-design.md, v13).
__device__ __forceinline__ void e2m1x4_to_float(uint32_t codes, float (&v)[4]) {
  const uint32_t m = codes & 0x7777u;  // a selector: nibble j picks byte m_j of {x, y}
  // m:          0     1     2     3     4     5     6     7
  // |value|:    0     0.5   1     1.5   2     3     4     6
  // bits 31-24: 00    3F    3F    3F    40    40    40    40
  // bits 23-16: 00    00    80    C0    00    40    80    C0
  const uint32_t exp_bytes = __byte_perm(0x3F3F3F00u, 0x40404040u, m);  // byte j: value j's
  const uint32_t low_bytes = __byte_perm(0xC0800000u, 0xC0804000u, m);
  // Sign of value j (bit 4j + 3) to bit 8j + 7: the code bytes doubled ([c0, c0, c1, c1], byte 0
  // first), even bytes shifted up a nibble.
  const uint32_t twice = __byte_perm(codes, 0u, 0x1100u);
  const uint32_t signs = ((twice << 4) & 0x00800080u) | (twice & 0x80008000u);
  const uint32_t top = exp_bytes | signs;
  const uint32_t v01 = __byte_perm(low_bytes, top, 0x5140u);  // [low0, top0, low1, top1]
  const uint32_t v23 = __byte_perm(low_bytes, top, 0x7362u);
  v[0] = __uint_as_float(v01 << 16);
  v[1] = __uint_as_float(v01 & 0xFFFF0000u);
  v[2] = __uint_as_float(v23 << 16);
  v[3] = __uint_as_float(v23 & 0xFFFF0000u);
}

__global__ void __launch_bounds__(kReadBlockThreads)
    nvfp4_read_kernel(const __grid_constant__ ReadKernelDesc d) {
  const uint64_t thread = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto item = static_cast<uint32_t>(thread >> 2);  // items < 2^31: fits
  if (item >= d.page.items) return;
  const uint32_t quarter = static_cast<uint32_t>(thread) & 3u;
  const ItemIndex ix = split_item(d.page, item);
  // Programmatic dependent launch (launch_programmatic), as the write: nothing the previous kernel
  // on the stream wrote (slots, cache, output) is touched before the wait (docs/kernel-design.md,
  // v17r).
  //
  // The slot's line is asked into L2 before the wait, as the streaming write does (an L2 prefetch
  // returns nothing to the thread, so no stale value is read): every page load waits on the slot,
  // and in a chain of reads that first DRAM trip then runs under the previous kernel's tail
  // (docs/kernel-design.md, v44r).
  const void* slot_at = slot_address(d.slots, d.slots_are_i64, ix.token);
  asm volatile("prefetch.global.L2 [%0];" ::"l"(slot_at));
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t slot = load_slot_at(slot_at, d.slots_are_i64);

  float4* dst[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    dst[s] =
        reinterpret_cast<float4*>(d.dst[s] + static_cast<int64_t>(ix.token) * d.token_stride[s] +
                                  static_cast<int64_t>(ix.head) * d.head_stride[s] +
                                  static_cast<int64_t>(ix.group) * 16 + quarter * 4);
  }
  if (slot < 0 || slot >= d.page.num_slots) {
    // Padding reads as zeros; a slot past the cache as NaN (the reader cannot refuse it on the
    // host without synchronizing on the slot mapping).
    const float fill = slot < 0 ? 0.0f : __uint_as_float(0x7FC00000u);
    const float4 v = make_float4(fill, fill, fill, fill);
    __stcs(dst[0], v);
    __stcs(dst[1], v);
    return;
  }
  uint64_t page_index;
  uint32_t t;
  split_slot(d.page, slot, page_index, t);
  const uint8_t* page = d.cache + page_index * d.page.page_bytes;

  uint32_t codes[2];
  uint8_t scale[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const SideAddressing& a = d.page.side[s];
    codes[s] = load_codes(page + a.data_offset(t, ix.head, ix.group) + 2 * quarter,
                          d.page.data_access_bytes);
    scale[s] = __ldg(page + a.scale_offset(t, ix.head, a.scale_group_term(ix.group)));
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    // nvfp4_dequantize(code_j, scale, k_scale), its E2M1 decode four codes at a time.
    const float step = nvfp4_dequantize_step(scale[s], d.scale[s]);
    float v[4];
    e2m1x4_to_float(codes[s], v);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = detail::mul_rn(v[j], step);
    // Streaming store: the output is written once and not read back by this kernel.
    __stcs(dst[s], make_float4(v[0], v[1], v[2], v[3]));
  }
}

}  // namespace

// 128 threads a block, whatever the size: faster than 256, and 64 is far slower for large reads
// (each thread's work is short, and blocks start at a limited rate) (docs/kernel-design.md, v26).
LaunchShape read_launch_shape(uint32_t items) {
  return blocks_of(uint64_t{items} * kReadThreadsPerItem, kReadBlockThreads);
}

Status launch_read(const ReadKernelDesc& desc, const LaunchShape& shape, CUstream_st* stream,
                   int ordinal) noexcept {
  return launch_programmatic("read kernel", reinterpret_cast<const void*>(nvfp4_read_kernel), &desc,
                             sizeof desc, shape.blocks, shape.threads, stream, ordinal);
}

int preload_read_kernel() noexcept {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, nvfp4_read_kernel);
}

}  // namespace kvq::cuda
