#pragma once
// Host entry points of the write and read kernels. No CUDA header: cudaStream_t is CUstream_st*.
#include "kernel_desc.h"
#include "kvq/core/status.h"

struct CUstream_st;

namespace kvq::cuda {

struct LaunchShape {
  unsigned blocks = 0;
  unsigned threads = 0;
};

// `threads` threads in blocks of `block_threads` (the last one partly idle).
LaunchShape blocks_of(uint64_t threads, unsigned block_threads);
// Blocks for `threads` threads: 256 threads a block, 128 when that leaves SMs idle (decode
// batches), so a small launch spreads over more SMs.
LaunchShape launch_shape(uint64_t threads, int num_sms);
// The write's grid: one thread per unit of desc.groups_per_thread items and
// desc.sides_per_thread sides. Streaming writes (at most one wave) take launch_shape; larger
// ones, blocks of wave_block_threads(desc) (kernel_desc.h).
LaunchShape write_launch_shape(const WriteKernelDesc& desc, int num_sms);

// Queues the write on `stream` (nothing else: no sync, no allocation; `ordinal`, the current
// device, only names it in messages). Returns the launch error, if any, as ErrorCode::runtime,
// told apart from an error left over from earlier work (cuda_util.h, launch_status).
Status launch_write(const WriteKernelDesc& desc, InputType input, const LaunchShape& shape,
                    CUstream_st* stream, int ordinal) noexcept;

// The read kernel runs kReadThreadsPerItem threads per work item (each stores one float4 of each
// side), kReadBlockThreads a block at every size.
inline constexpr int kReadThreadsPerItem = 4;
inline constexpr unsigned kReadBlockThreads = 128;
LaunchShape read_launch_shape(uint32_t items);

Status launch_read(const ReadKernelDesc& desc, const LaunchShape& shape, CUstream_st* stream,
                   int ordinal) noexcept;

// Loads the kernels a writer (its E2M1 path, every input dtype) or reader may launch, on the
// current device, at creation: under CUDA's lazy module loading the first launch would load
// them, and drivers before 12.3 cannot load a module while a stream is being captured. The
// writer's also sets *bars, the write sizes where the thread mapping changes (from the kernels'
// occupancy on this device; plan_write). Return the cudaError_t (0 = success).
int preload_write_kernels(bool use_hw_e2m1, int num_sms, WriteSizeBars* bars) noexcept;
int preload_read_kernel() noexcept;

// For the probe: cudaSuccess (0) when the write kernel has an image for the current device (built
// for 90a and 100a: another arch, e.g. sm_120, has none), else the cudaError_t, with `detail`.
int write_kernel_loadable(std::string* detail) noexcept;

}  // namespace kvq::cuda
