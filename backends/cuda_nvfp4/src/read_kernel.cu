// The NVFP4 read (dequantize) kernel: one thread per (token, head, group), K and V together.
// Per side: 8 data bytes + 1 scale byte in, 16 floats (four 16-byte stores) out, each value
// kvq::nvfp4_dequantize(code, scale, k_scale) -- the one definition every reader uses, so this
// reader agrees with the CPU one bit for bit.
#include <cuda_runtime.h>

#include <string>

#include "cuda_util.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "slot_lookup.cuh"
#include "write_kernel.h"

namespace kvq::cuda_nvfp4 {
namespace {

constexpr int kMaxThreads = 256;

__device__ __forceinline__ uint2 load_data(const uint8_t* p, int access) {
  if (access >= 8) return __ldg(reinterpret_cast<const uint2*>(p));
  uint2 w{0, 0};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w.x |= static_cast<uint32_t>(__ldg(p + k)) << (8 * k);
    w.y |= static_cast<uint32_t>(__ldg(p + 4 + k)) << (8 * k);
  }
  return w;
}

__device__ __forceinline__ void store16(float* dst, const float (&v)[16]) {
  auto* q = reinterpret_cast<float4*>(dst);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    q[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

__global__ void __launch_bounds__(kMaxThreads)
    nvfp4_read_kernel(const __grid_constant__ ReadKernelDesc d) {
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= d.page.items) return;
  const ItemIndex ix = split_item(d.page, item);
  const int64_t slot = load_slot(d.slots, d.slots_are_i64, ix.token);

  float* dst[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    dst[s] = d.dst[s] + static_cast<int64_t>(ix.token) * d.token_stride[s] +
             static_cast<int64_t>(ix.head) * d.head_stride[s] + static_cast<int64_t>(ix.group) * 16;
  }
  if (slot < 0 || slot >= d.page.num_slots) {
    // Padding reads as zeros; a slot past the cache as NaN (the reader cannot refuse it on the
    // host without synchronizing on the slot mapping).
    const float fill = slot < 0 ? 0.0f : __uint_as_float(0x7FC00000u);
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = fill;
    store16(dst[0], v);
    store16(dst[1], v);
    return;
  }
  uint64_t page_index;
  uint32_t t;
  split_slot(d.page, slot, page_index, t);
  const uint8_t* page = d.cache + page_index * d.page.page_bytes;

  uint2 data[2];
  uint8_t scale[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const SideAddressing& a = d.page.side[s];
    data[s] = load_data(page + a.data_offset(t, ix.head, ix.group), d.page.data_access_bytes);
    scale[s] = __ldg(page + a.scale_offset(t, ix.head, a.scale_group_term(ix.group)));
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t word = i < 8 ? data[s].x : data[s].y;
      const auto code = static_cast<uint8_t>((word >> (4 * (i % 8))) & 0xFu);
      v[i] = nvfp4_dequantize(code, scale[s], d.scale[s]);
    }
    store16(dst[s], v);
  }
}

}  // namespace

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

}  // namespace kvq::cuda_nvfp4
