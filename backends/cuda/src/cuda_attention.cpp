#include "cuda_attention.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "attention_kernel.h"
#include "cuda_util.h"
#include "cuda_writer.h"
#include "kvq/core/contract.h"
#include "kvq/core/logging.h"

namespace kvq::cuda {

Status CudaAttention::create(const PageLayout& layout, const std::optional<Device>& device,
                             CudaAttention** out) noexcept {
  return catch_as_status([&] {
    std::unique_ptr<CudaAttention> a(new CudaAttention());
    const kvq_page_desc& page = layout.descriptor();
    throw_if_error(check_attention_geometry(page));
    int ordinal = 0;
    throw_if_error(resolve_device(device, &ordinal));
    throw_if_error(open_device(ordinal, &a->info_));
    a->layout_ = std::make_unique<PageLayout>(layout);
    a->needs_ = kvq_requirements{
        sizeof(kvq_requirements),
        {kDLCUDA, ordinal},
        (1u << static_cast<uint32_t>(DType::bf16)) | (1u << static_cast<uint32_t>(DType::f16)),
        1,
        KVQ_REQ_DEVICE_SLOTS | KVQ_REQ_DEVICE_SCALES | KVQ_REQ_HEAD_SCALES,
    };
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
    }
    if (cudaError_t err =
            prepare_attention_kernels(page.format, static_cast<int32_t>(page.head_size));
        err != cudaSuccess) {
      throw Error(
          cuda_status(err, "cudaFuncSetAttribute (attention kernels' shared memory)", ordinal));
    }
    // One wave of resident CTAs: what a split call is cut to fill.
    a->target_ctas_ =
        a->info_.num_sms * attention_ctas_per_sm(page.format, static_cast<int32_t>(page.head_size));
    void* counters = nullptr;
    if (cudaError_t err = cudaMalloc(&counters, sizeof(AttentionCounters)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMalloc (attention counters)", ordinal));
    }
    a->counters_ = static_cast<AttentionCounters*>(counters);
    if (cudaError_t err = cudaMemset(counters, 0, sizeof(AttentionCounters)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemset (attention counters)", ordinal));
    }
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaDeviceSynchronize", ordinal));
    }
    KVQ_LOG_DEBUG(
        "cuda attention on {}: {} shared bytes a CTA, split target {} CTAs", a->info_.description,
        attention_shared_bytes(page.format, static_cast<int32_t>(page.head_size)), a->target_ctas_);
    *out = a.release();
  });
}

CudaAttention::~CudaAttention() {
  if (counters_ != nullptr) {
    DeviceGuard guard(info_.ordinal);
    (void)cudaFree(counters_);
  }
}

Status CudaAttention::plan(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks,
                           SplitPlan* out) const noexcept {
  return plan_splits(layout_->descriptor(), num_seqs, num_q_heads, max_blocks, target_ctas_, out);
}

Status CudaAttention::workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks,
                                      uint64_t* bytes) const noexcept {
  if (bytes == nullptr) return {ErrorCode::invalid_argument, "bytes: null pointer"};
  return workspace_bound(layout_->descriptor(), num_seqs, num_q_heads, max_blocks, target_ctas_,
                         bytes);
}

Status CudaAttention::attend(const AttentionArgs& in) noexcept {
  AttentionArgs args = in;
  if (args.softmax_scale == 0.0f) {
    args.softmax_scale = default_softmax_scale(layout_->geometry().head_size);
  }
  uint64_t needed = 0;
  if (args.query.ndim == 3 && args.block_tables.ndim == 2) {
    if (Status s = workspace_bytes(args.query.shape[0], args.query.shape[1],
                                   args.block_tables.shape[1], &needed);
        !s) {
      return s;
    }
  }
  if (Status s = check_attention_args(args, *layout_, needs_, "cuda", needed); !s) return s;
  return attend_checked(args);
}

// The hot path: no allocation, no lock, no exception unless something is refused; CUDA calls:
// cudaGetDevice, cudaGetLastError and the launches.
Status CudaAttention::attend_checked(const AttentionArgs& args) noexcept {
  try {
    const kvq_page_desc& page = layout_->descriptor();
    SplitPlan p;
    if (Status s = plan(args.query.shape[0], args.query.shape[1], args.block_tables.shape[1], &p);
        !s) {
      return s;
    }
    AttentionKernelDesc desc{};
    if (Status s = plan_attention(args, page, p, counters_, &desc); !s) return s;
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) return cuda_status(guard.error(), "cudaSetDevice", ordinal);
    return launch_attention(
        desc, page.format, static_cast<int32_t>(page.head_size), args.query.dtype == DType::bf16,
        static_cast<int32_t>(args.query.shape[0]), static_cast<cudaStream_t>(args.stream), ordinal);
  } catch (...) {
    return catch_as_status([] { throw; });
  }
}

Status CudaAttention::take_out_of_range(AttentionOutOfRange* counts) noexcept {
  if (counts == nullptr) return {ErrorCode::invalid_argument, "counts: null pointer"};
  return catch_as_status([&] {
    std::lock_guard<std::mutex> lock(take_mutex_);
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
    }
    // Attends may have run on any stream or in graph replays: wait for the whole device.
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaDeviceSynchronize (attends so far)", ordinal));
    }
    AttentionCounters now{};
    if (cudaError_t err = cudaMemcpy(&now, counters_, sizeof now, cudaMemcpyDeviceToHost);
        err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemcpy (attention counters)", ordinal));
    }
    counts->block_ids = static_cast<int64_t>(now.block_ids - taken_.block_ids);
    counts->seq_lens = static_cast<int64_t>(now.seq_lens - taken_.seq_lens);
    counts->scales = static_cast<int64_t>(now.scales - taken_.scales);
    taken_ = now;
  });
}

}  // namespace kvq::cuda
