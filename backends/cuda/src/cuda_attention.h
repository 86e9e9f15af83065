#pragma once
// The cuda KVCacheAttention: paged decode attention over the pages, on the caller's stream
// (AttentionArgs::stream). An attend() is checked on the host (the contract, with
// requirements()), plans its split (attention_plan.h), fills one descriptor and launches the
// main kernel (and, for a split call, the reduce kernel): no host sync, no allocation, no lock,
// so it can be captured in a CUDA graph. Out-of-range block ids and seq_lens (device values) are
// skipped and counted in device counters allocated once per object; take_out_of_range()
// synchronizes the device and reports their growth since the last take. A graph that captured
// an attend refers to the object's counters: destroy it only after the graph's last replay.
#include <memory>
#include <mutex>
#include <optional>

#include "attention_desc.h"
#include "attention_plan.h"
#include "kvq/abi/plugin.h"
#include "kvq/core/attention.h"
#include "kvq/core/page_layout.h"
#include "probe.h"

namespace kvq::cuda {

class CudaAttention final : public KVCacheAttention {
 public:
  // Checks the device (open_device) and the geometry (check_attention_geometry), allocates the
  // counters, prepares the kernels' shared memory.
  static Status create(const PageLayout& layout, const std::optional<Device>& device,
                       CudaAttention** out) noexcept;
  ~CudaAttention() override;
  CudaAttention(const CudaAttention&) = delete;
  CudaAttention& operator=(const CudaAttention&) = delete;

  // Checks the contract, then attend_checked().
  Status attend(const AttentionArgs& args) noexcept override;
  // The attention of arguments the contract has passed (softmax_scale resolved).
  Status attend_checked(const AttentionArgs& args) noexcept;
  Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks_per_seq,
                         uint64_t* bytes) const noexcept override;
  Status take_out_of_range(AttentionOutOfRange* counts) noexcept override;
  const kvq_requirements& requirements() const noexcept { return needs_; }
  const PageLayout& layout() const noexcept override { return *layout_; }
  Device device() const noexcept override { return Device::cuda(info_.ordinal); }

  // The split a call of this shape gets (for tests and the benchmark's report).
  Status plan(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks_per_seq,
              SplitPlan* out) const noexcept;

 private:
  CudaAttention() = default;

  DeviceInfo info_;
  kvq_requirements needs_{};
  std::unique_ptr<PageLayout> layout_;
  int32_t target_ctas_ = 0;  // resident CTAs of the main kernel on the device: the split target
  AttentionCounters* counters_ = nullptr;  // device
  std::mutex take_mutex_;
  AttentionCounters taken_{};  // the counters at the last take (under take_mutex_)
};

}  // namespace kvq::cuda
