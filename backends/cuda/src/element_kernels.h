#pragma once
// Host entry points of the per-element write and read kernels (fp8_e4m3, fp8_e5m2, bf16 pages).
// No CUDA header: cudaStream_t is CUstream_st*.
#include <cstdint>

#include "element_kernel_desc.h"
#include "element_plan.h"
#include "kvq/core/status.h"
#include "write_kernel.h"

struct CUstream_st;

namespace kvq::cuda {

// The write kernel of each format for (input dtype, streaming loads); one .cu file a format.
const void* element_write_kernel_fp8_e4m3(InputType input, bool streaming);
const void* element_write_kernel_fp8_e5m2(InputType input, bool streaming);
const void* element_write_kernel_bf16(InputType input, bool streaming);
const void* element_write_kernel(int32_t format, InputType input, bool streaming);
const void* element_read_kernel(int32_t format);

// The write's grid: one thread an item. Writes of at most one wave (streaming) take
// launch_shape's blocks (256, 128 where that leaves SMs idle); larger ones blocks of
// kElementWaveBlockThreads, whose SM slots free sooner inside a wave and in the last one (the
// NVFP4 writer's measurement, docs/kernel-design.md, v26, v43).
inline constexpr unsigned kElementWaveBlockThreads = 128;
LaunchShape element_write_launch_shape(const ElementWriteDesc& desc, int num_sms);

// The read's grid: one thread an item (kReadChunkElements elements of each side), 128 a block,
// as the NVFP4 reader (docs/kernel-design.md, v26).
inline constexpr unsigned kElementReadBlockThreads = 128;
LaunchShape element_read_launch_shape(uint32_t items);

// Queue the kernel on `stream` (no sync, no allocation), through launch_programmatic.
Status launch_element_write(const ElementWriteDesc& desc, InputType input, const LaunchShape& shape,
                            CUstream_st* stream, int ordinal) noexcept;
Status launch_element_read(const ElementReadDesc& desc, const LaunchShape& shape,
                           CUstream_st* stream, int ordinal) noexcept;

// Blocks of the write kernels (their __launch_bounds__).
inline constexpr int kElementWriteMaxThreads = 256;

// Loads the write kernels of `format` (every input dtype, both load paths) on the current device
// at creation (as preload_write_kernels, write_kernel.h) and sets *bars from their occupancy.
// Return the cudaError_t (0 = success).
int preload_element_write_kernels(int32_t format, int num_sms, ElementWriteBars* bars) noexcept;
int preload_element_read_kernel(int32_t format) noexcept;

}  // namespace kvq::cuda
