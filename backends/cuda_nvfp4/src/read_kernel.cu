// The NVFP4 read (dequantize) kernel: four threads per (token, head, group), K and V together.
// Thread q of a group dequantizes elements 4q..4q+3 of each side: 2 data bytes + 1 scale byte in
// (the group's other threads read the neighbouring bytes of the same sectors: L1 merges them),
// one 16-byte streaming store out. Consecutive threads store consecutive float4s, so one warp
// store instruction writes 512 contiguous bytes of a [T, H, D] output with contiguous rows (the
// earlier one-thread-per-group version stored 4 x 16 bytes per thread, and each warp store
// instruction touched 32 pieces spread over 2 KiB: about 24% of copy bandwidth on the H200).
// Every value is kvq::nvfp4_dequantize(code, scale, k_scale) -- the one definition every reader
// uses, so this reader agrees with the CPU one bit for bit.
#include <cuda_runtime.h>

#include <string>

#include "cuda_util.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "slot_lookup.cuh"
#include "write_kernel.h"

namespace kvq::cuda_nvfp4 {
namespace {

constexpr int kMaxThreads = 256;
static_assert(kReadThreadsPerItem == 4, "the kernel splits a group of 16 into 4 x 4 values");

// 2 data bytes (4 codes, element 4q + j in bits [4j, 4j + 4)) at `p`, which is 2-byte aligned
// when access >= 2.
__device__ __forceinline__ uint32_t load_codes(const uint8_t* p, int access) {
  if (access >= 2) return __ldg(reinterpret_cast<const unsigned short*>(p));
  return static_cast<uint32_t>(__ldg(p)) | (static_cast<uint32_t>(__ldg(p + 1)) << 8);
}

__global__ void __launch_bounds__(kMaxThreads)
    nvfp4_read_kernel(const __grid_constant__ ReadKernelDesc d) {
  const uint64_t thread = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto item = static_cast<uint32_t>(thread >> 2);  // items < 2^31: fits
  if (item >= d.page.items) return;
  const uint32_t quarter = static_cast<uint32_t>(thread) & 3u;
  const ItemIndex ix = split_item(d.page, item);
  const int64_t slot = load_slot(d.slots, d.slots_are_i64, ix.token);

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
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = nvfp4_dequantize(static_cast<uint8_t>(codes[s] >> (4 * j)), scale[s], d.scale[s]);
    }
    // Streaming store: the output is written once and not read back by this kernel.
    __stcs(dst[s], make_float4(v[0], v[1], v[2], v[3]));
  }
}

}  // namespace

LaunchShape read_launch_shape(uint32_t items, int num_sms) {
  return launch_shape(uint64_t{items} * kReadThreadsPerItem, num_sms);
}

Status launch_read(const ReadKernelDesc& desc, const LaunchShape& shape, CUstream_st* stream,
                   int ordinal) noexcept {
  if (shape.blocks == 0) return Status::ok();
  const PendingError pending = take_pending_error();
  cudaError_t err = pending.error;
  if (!pending.sticky) {
    nvfp4_read_kernel<<<shape.blocks, shape.threads, 0, stream>>>(desc);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && pending.error == cudaSuccess) return Status::ok();  // the usual case
  try {
    return launch_status("read kernel", ordinal, pending, err, shape.blocks, shape.threads,
                         sizeof desc);
  } catch (...) {  // formatting the message failed (out of memory)
    return {ErrorCode::runtime, "cuda_nvfp4 read kernel launch failed"};
  }
}

int preload_read_kernel() noexcept {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, nvfp4_read_kernel);
}

}  // namespace kvq::cuda_nvfp4
