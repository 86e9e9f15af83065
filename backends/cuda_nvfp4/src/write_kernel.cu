// The NVFP4 write kernel: one thread per (token, head, group), K and V together.
//
// Per thread: 2 x 32 bytes of bf16 in (four independent 16-byte loads in flight, issued before
// the slot is known), 2 x (8 data bytes + 1 scale byte) out. A warp reads 1 KiB of consecutive
// input and writes whole 32-byte sectors of data rows. The kernel is memory-bound by design:
// about 13 instructions per element (mostly the software E2M1), against a budget of about 24 at
// the H200's copy bandwidth (backends/cuda_nvfp4/README.md has the arithmetic).
#include <cuda_runtime.h>

#include <string>

#include "cuda_util.h"
#include "group_quantize.cuh"
#include "input_groups.cuh"
#include "slot_lookup.cuh"
#include "write_kernel.h"

namespace kvq::cuda_nvfp4 {
namespace {

constexpr int kMaxThreads = 256;

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

template <InputType In, bool kUseHwE2m1>
__global__ void __launch_bounds__(kMaxThreads)
    nvfp4_write_kernel(const __grid_constant__ WriteKernelDesc d) {
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= d.page.items) return;
  const ItemIndex ix = split_item(d.page, item);

  // Everything independent first: the slot, both input groups, device-side scales.
  const int64_t slot = load_slot(d.slots, d.slots_are_i64, ix.token);
  RawGroup<In> raw[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int64_t element = static_cast<int64_t>(ix.token) * d.token_stride[s] +
                            static_cast<int64_t>(ix.head) * d.head_stride[s] +
                            static_cast<int64_t>(ix.group) * 16;
    raw[s] = load_group<In>(static_cast<const char*>(d.src[s]) +
                            element * InputTraits<In>::kElementBytes);
  }
  float global[2], inv_global[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    if (d.scale_ptr[s] != nullptr) {
      global[s] = __frcp_rn(__ldg(d.scale_ptr[s]));  // nvfp4_global_scale: 1 / scale
      inv_global[s] = __frcp_rn(global[s]);
    } else {
      global[s] = d.global_scale[s];
      inv_global[s] = d.inv_global_scale[s];
    }
  }

  if (slot < 0) return;  // padding
  if (slot >= d.page.num_slots) {
    // Never written; counted once per token (by its first item) for take_out_of_range_slots.
    if (ix.head == 0 && ix.group == 0) atomicAdd(d.out_of_range, 1ull);
    return;
  }
  uint64_t page_index;
  uint32_t t;
  split_slot(d.page, slot, page_index, t);
  uint8_t* page = d.cache + page_index * d.page.page_bytes;

#pragma unroll
  for (int s = 0; s < 2; ++s) {
    float x[16];
    widen_group<In>(raw[s], x);
    const QuantizedGroup q = quantize_group16<kUseHwE2m1>(x, global[s], inv_global[s]);
    const SideAddressing& a = d.page.side[s];
    store_data(page + a.data_offset(t, ix.head, ix.group), q.data[0], q.data[1],
               d.page.data_access_bytes);
    page[a.scale_offset(t, ix.head, a.scale_group_term(ix.group))] = static_cast<uint8_t>(q.scale);
  }
}

template <InputType In>
void launch_typed(const WriteKernelDesc& d, const LaunchShape& shape, cudaStream_t stream) {
  if (d.use_hw_e2m1) {
    nvfp4_write_kernel<In, true><<<shape.blocks, shape.threads, 0, stream>>>(d);
  } else {
    nvfp4_write_kernel<In, false><<<shape.blocks, shape.threads, 0, stream>>>(d);
  }
}

}  // namespace

LaunchShape launch_shape(uint64_t threads, int num_sms) {
  LaunchShape s;
  s.threads = kMaxThreads;
  if (num_sms > 0 && threads < static_cast<uint64_t>(num_sms) * kMaxThreads) s.threads = 128;
  s.blocks = static_cast<unsigned>((threads + s.threads - 1) / s.threads);
  return s;
}

Status launch_write(const WriteKernelDesc& desc, InputType input, const LaunchShape& shape,
                    CUstream_st* stream, int ordinal) noexcept {
  if (shape.blocks == 0) return Status::ok();
  const PendingError pending = take_pending_error();
  cudaError_t err = pending.error;
  if (!pending.sticky) {
    switch (input) {
      case InputType::bf16: launch_typed<InputType::bf16>(desc, shape, stream); break;
      case InputType::f16: launch_typed<InputType::f16>(desc, shape, stream); break;
      case InputType::f32: launch_typed<InputType::f32>(desc, shape, stream); break;
    }
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && pending.error == cudaSuccess) return Status::ok();  // the usual case
  try {
    return launch_status("write kernel", ordinal, pending, err, shape.blocks, shape.threads,
                         sizeof desc);
  } catch (...) {  // formatting the message failed (out of memory)
    return {ErrorCode::runtime, "cuda_nvfp4 write kernel launch failed"};
  }
}

bool write_kernel_loadable(std::string* detail) noexcept {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, nvfp4_write_kernel<InputType::bf16, false>);
  if (err == cudaSuccess) return true;
  (void)cudaGetLastError();
  if (detail) *detail = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  return false;
}

int preload_write_kernels(bool use_hw_e2m1) noexcept {
  const void* kernels[3] = {
      use_hw_e2m1 ? reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::bf16, true>)
                  : reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::bf16, false>),
      use_hw_e2m1 ? reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::f16, true>)
                  : reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::f16, false>),
      use_hw_e2m1 ? reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::f32, true>)
                  : reinterpret_cast<const void*>(nvfp4_write_kernel<InputType::f32, false>)};
  for (const void* k : kernels) {
    cudaFuncAttributes attr{};
    if (cudaError_t err = cudaFuncGetAttributes(&attr, k); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace kvq::cuda_nvfp4
