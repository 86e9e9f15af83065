#pragma once
// Launching the decode-attention kernels (attention_kernel.cu): the main kernel over a grid of
// (split, kv head x head tile, sequence) CTAs and, when the call is split, the reduce kernel
// that merges the splits' partial results.
#include <cuda_runtime.h>

#include "attention_desc.h"
#include "kvq/core/status.h"

namespace kvq::cuda {

// Lets every kernel instance of (format, head_size) use the dynamic shared memory it needs
// (cudaFuncSetAttribute): once per attention object, on its device, before any capture.
cudaError_t prepare_attention_kernels(int32_t format, int32_t head_size) noexcept;

// CTAs of the main kernel one multiprocessor holds at once (registers, shared memory), at
// least 1; after prepare_attention_kernels.
int attention_ctas_per_sm(int32_t format, int32_t head_size) noexcept;

// Enqueues the attention described by `d` (num_seqs sequences) on `stream`: nothing else, no
// allocation, no sync, so it may be captured in a CUDA graph.
Status launch_attention(const AttentionKernelDesc& d, int32_t format, int32_t head_size,
                        bool query_bf16, int32_t num_seqs, cudaStream_t stream,
                        int ordinal) noexcept;

// The shared memory one CTA of the main kernel uses (for tests and the design notes).
size_t attention_shared_bytes(int32_t format, int32_t head_size) noexcept;

}  // namespace kvq::cuda
