// Launch shapes, launches and preloading of the per-element kernels (element_kernels.h).
#include <cuda_runtime.h>

#include "cuda_util.h"
#include "element_kernels.h"

namespace kvq::cuda {

const void* element_write_kernel(int32_t format, InputType input, bool streaming) {
  switch (format) {
    case KVQ_FORMAT_FP8_E4M3: return element_write_kernel_fp8_e4m3(input, streaming);
    case KVQ_FORMAT_FP8_E5M2: return element_write_kernel_fp8_e5m2(input, streaming);
    case KVQ_FORMAT_BF16: return element_write_kernel_bf16(input, streaming);
    default: return nullptr;
  }
}

LaunchShape element_write_launch_shape(const ElementWriteDesc& desc, int num_sms) {
  if (desc.streaming) return launch_shape(desc.page.items, num_sms);
  return blocks_of(desc.page.items, kElementWaveBlockThreads);
}

LaunchShape element_read_launch_shape(uint32_t items) {
  return blocks_of(items, kElementReadBlockThreads);
}

Status launch_element_write(const ElementWriteDesc& desc, InputType input, const LaunchShape& shape,
                            CUstream_st* stream, int ordinal) noexcept {
  return launch_programmatic("write kernel",
                             element_write_kernel(desc.format, input, desc.streaming != 0), &desc,
                             sizeof desc, shape.blocks, shape.threads, stream, ordinal);
}

Status launch_element_read(const ElementReadDesc& desc, const LaunchShape& shape,
                           CUstream_st* stream, int ordinal) noexcept {
  return launch_programmatic("read kernel", element_read_kernel(desc.format), &desc, sizeof desc,
                             shape.blocks, shape.threads, stream, ordinal);
}

int preload_element_write_kernels(int32_t format, int num_sms, ElementWriteBars* bars) noexcept {
  for (InputType input : {InputType::bf16, InputType::f16, InputType::f32}) {
    for (bool streaming : {false, true}) {
      cudaFuncAttributes attr{};
      const void* kernel = element_write_kernel(format, input, streaming);
      if (kernel == nullptr) return cudaErrorInvalidValue;
      if (cudaError_t err = cudaFuncGetAttributes(&attr, kernel); err != cudaSuccess) return err;
    }
  }
  // Streaming loads (an L2 prefetch before the wait, then evict-first) while the grid is at most
  // one wave, as the NVFP4 writer's rule (docs/kernel-design.md, v11, v12, v18): every block is
  // resident at once, so all of them prefetch under the previous kernel. The wave of the bf16
  // kernel (the others are compiled under the same bounds).
  int blocks_per_sm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks_per_sm, element_write_kernel(format, InputType::bf16, true),
          kElementWriteMaxThreads, 0);
      err != cudaSuccess) {
    return err;
  }
  const uint64_t sms = static_cast<uint64_t>(num_sms > 0 ? num_sms : 1);
  bars->stream_max_items = static_cast<uint64_t>(blocks_per_sm) * kElementWriteMaxThreads * sms;
  return cudaSuccess;
}

int preload_element_read_kernel(int32_t format) noexcept {
  cudaFuncAttributes attr{};
  const void* kernel = element_read_kernel(format);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  return cudaFuncGetAttributes(&attr, kernel);
}

}  // namespace kvq::cuda
