#pragma once
// The cuda KVCacheWriter and KVCacheReader: device tensors in, pages out, on the caller's
// stream (WriteArgs::stream, a cudaStream_t; null = the legacy default stream of the device).
// nvfp4 pages go to the NVFP4 kernels (write_kernel.cu, read_kernel.cu), fp8_e4m3, fp8_e5m2 and
// bf16 pages to the per-element ones (element_*.cu); the page format decides once, at creation.
// A write is checked on the host (the contract, kvq/core/contract.h, with write_requirements),
// fills one descriptor and launches one kernel: no host sync, no
// allocation, no lock. Out-of-range slots are skipped and counted in device counters allocated
// once per writer and never reset (WriteCounters); so are the tokens of writes that found an
// unusable device scale and wrote nothing. take_out_of_range_slots() synchronizes and reports
// their growth since the last take: the slots as its count, such tokens as an invalid_argument
// Status. A CUDA graph that captured a write refers to the writer's counters: destroy the writer
// only after its last replay.
//
// Stream capture: write() and read() may be captured into a CUDA graph (any capture mode). They
// call only capture-safe runtime functions on the way (cudaGetDevice, cudaStreamIsCapturing,
// cudaGetLastError, the launch); the stream's device is asked with cudaStreamGetDevice only
// outside a capture, once per stream (StreamBook), since that call fails on a capturing stream
// and invalidates the capture. A stream first seen while capturing is not checked (a launch
// into another device's stream fails anyway, with CUDA's own error).
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "cuda_util.h"
#include "element_plan.h"
#include "kernel_desc.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/registry.h"
#include "probe.h"
#include "write_plan.h"

namespace kvq::cuda {

// cuda:0 when unset; a CPU device is invalid_argument.
Status resolve_device(const std::optional<Device>& device, int* ordinal);

class CudaWriter final : public KVCacheWriter {
 public:
  // Checks the device (probe.h's open_device), builds the layout, allocates the counter.
  static Status create(const BackendOptions& options, KVCacheWriter** out) noexcept;
  static Status create(const PageLayout& layout, const std::optional<Device>& device,
                       CudaWriter** out) noexcept;
  ~CudaWriter() override;

  // Checks the contract, then write_checked().
  Status write(const WriteArgs& args) noexcept override;
  // The write of arguments the contract has passed (the plugin's path: the host checked).
  Status write_checked(const WriteArgs& args) noexcept;
  const kvq_requirements& requirements() const noexcept { return needs_; }
  const PageLayout& layout() const noexcept override { return *layout_; }
  Device device() const noexcept override { return Device::cuda(info_.ordinal); }
  Status take_out_of_range_slots(int64_t* count) noexcept override;

 private:
  CudaWriter() = default;

  DeviceInfo info_;
  kvq_requirements needs_{};  // write_requirements / read_requirements of info_.ordinal
  std::unique_ptr<PageLayout> layout_;
  bool element_ = false;               // a per-element page format: element_page_, not addressing_
  PageAddressing addressing_{};        // nvfp4
  ElementPage element_page_{};         // fp8_e4m3, fp8_e5m2, bf16 (writer chunks)
  WriteCounters* counters_ = nullptr;  // device
  WriteSizeBars size_bars_;            // thread mapping by write size (plan_write)
  ElementWriteBars element_bars_;      // the same for the per-element kernel

  // Streams seen (their device) and those direct writes used since the last take.
  StreamBook streams_;
  // take() must synchronize the whole device: a write ran on the per-thread default stream
  // (another thread's take cannot name it) or on a stream past the book's capacity (until the next
  // take), or one was ever captured into a graph (its replays may run on any stream, at any time,
  // without calling write(): from then on, every take). (The legacy default stream is booked as
  // cudaStreamLegacy.)
  std::atomic<bool> sync_device_{false};
  std::atomic<bool> captured_{false};
  std::mutex take_mutex_;  // one take at a time; write() never locks
  WriteCounters taken_{};  // the counters at the last take (under take_mutex_)
};

class CudaReader final : public KVCacheReader {
 public:
  static Status create(const BackendOptions& options, KVCacheReader** out) noexcept;
  static Status create(const PageLayout& layout, const std::optional<Device>& device,
                       CudaReader** out) noexcept;

  // Checks the contract, then read_checked().
  Status read(const ReadArgs& args) noexcept override;
  Status read_checked(const ReadArgs& args) noexcept;
  const kvq_requirements& requirements() const noexcept { return needs_; }
  const PageLayout& layout() const noexcept override { return *layout_; }
  Device device() const noexcept override { return Device::cuda(info_.ordinal); }

 private:
  CudaReader() = default;

  DeviceInfo info_;
  kvq_requirements needs_{};  // write_requirements / read_requirements of info_.ordinal
  std::unique_ptr<PageLayout> layout_;
  bool element_ = false;
  PageAddressing addressing_{};
  ElementPage element_page_{};  // reader chunks (kReadChunkElements)
  StreamBook streams_;          // the device of each stream seen
};

}  // namespace kvq::cuda
