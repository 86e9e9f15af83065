#pragma once
// Small host helpers around the CUDA runtime: errors as kvq::Status, a scoped current device, the
// streams a writer or reader has seen, and launch error reporting that tells this launch's error
// from one left over by earlier work.
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "kvq/core/status.h"

namespace kvq::cuda {

// "cudaMalloc (out-of-range counter) on cuda:0 failed: out of memory (cudaErrorMemoryAllocation)".
// Resets the runtime's last error when it is `err` (the call just reported it; a sticky error
// stays, as it must). Safe while a stream is being captured: touches no stream.
Status cuda_status(cudaError_t err, const std::string& what, int ordinal);

// Makes `ordinal` current for a scope and puts the caller's device back afterwards (no-op when
// it already is current: the usual case, which costs one cudaGetDevice). Capture-safe.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  int ordinal_;
  cudaError_t error_ = cudaSuccess;
};

// "NVIDIA H200 (cuda:0, compute capability 9.0, 132 SMs)"
std::string describe_device(const cudaDeviceProp& prop, int ordinal);

// nullptr, cudaStreamLegacy, cudaStreamPerThread: always the current device's stream.
inline bool is_special_stream(const void* stream) {
  return stream == nullptr || stream == static_cast<const void*>(cudaStreamLegacy) ||
         stream == static_cast<const void*>(cudaStreamPerThread);
}

// The streams a writer or reader has been given: which device each belongs to (asked once per
// stream, with cudaStreamGetDevice outside any capture: that call fails on a capturing stream
// and invalidates the capture), and which ones direct writes used since the last
// take_out_of_range_slots. Lock-free and allocation-free, so write() needs no mutex and may run
// on several threads at once. Entries are claimed in order and never removed (a writer sees a
// handful of streams); past kCapacity, find_or_add returns nullptr and callers take the slow,
// safe path (ask every time, synchronize the whole device).
//
// Only "belongs to this device" is remembered: a refused stream is asked again next time, so a
// stream handle that CUDA reuses after cudaStreamDestroy is never refused on an old answer. (A
// reused handle now of another device, remembered as ours, makes the launch itself fail: CUDA
// refuses a kernel launch into a stream that is not the current device's.)
class StreamBook {
 public:
  static constexpr int kCapacity = 16;
  struct Entry {
    std::atomic<void*> stream{nullptr};  // key (cudaStreamLegacy for the legacy default stream)
    std::atomic<bool> on_device{false};  // belongs to the owner's device (asked and confirmed)
    std::atomic<bool> used{false};       // a direct write used it since the last take
  };

  // The entry of `stream` (not null), claimed when new; nullptr when the book is full.
  Entry* find_or_add(void* stream) noexcept;

  // Calls fn(void* stream) for every entry marked used, unmarking it first.
  template <class Fn>
  void take_used(Fn&& fn) {
    for (Entry& e : entries_) {
      void* s = e.stream.load(std::memory_order_acquire);
      if (s == nullptr) break;
      if (e.used.exchange(false, std::memory_order_acq_rel)) fn(s);
    }
  }

 private:
  Entry entries_[kCapacity];
};

// Kernel launches (write_kernel.cu, read_kernel.cu) go through these two, so that an error left
// over from earlier work on this thread (a failed call whose error nobody took, an invalidated
// capture) is never reported as the launch's own:
//   1. before the launch, take_pending_error() takes the pending error, if any (a non-sticky one
//      is reset by this; a sticky one -- the context is unusable -- stays);
//   2. after it, launch_status() takes the launch's error and words both.
struct PendingError {
  cudaError_t error = cudaSuccess;
  bool sticky = false;  // still there after cudaGetLastError: the context is unusable
};
PendingError take_pending_error() noexcept;

// `what`: "write kernel", "read kernel". ok when the launch succeeded (a non-sticky leftover is
// then logged as a warning and dropped: it was someone else's and is not this write's failure).
// Messages:
//   "cuda write kernel launch on cuda:0 (grid 101 x 128 threads, 312-byte descriptor)
//    failed: invalid argument (cudaErrorInvalidValue)"
//   "cuda write kernel not launched on cuda:0: the CUDA context is unusable after an
//    earlier error, left over from earlier work (not this write's): an illegal memory access
//    was encountered (cudaErrorIllegalAddress)"
// desc_bytes 0: a kernel launched without a descriptor (not named in the message).
Status launch_status(const char* what, int ordinal, const PendingError& pending, cudaError_t launch,
                     uint64_t blocks, unsigned threads, size_t desc_bytes);

// Launches `kernel`, whose one parameter is the descriptor at `desc` (passed by value,
// __grid_constant__), with programmatic dependent launch: it may start while the previous kernel
// on the stream is still running, overlapping that kernel's tail, and must wait for it
// (griddepcontrol.wait) before touching memory; CUDA graphs hold this as a programmatic edge.
// Between take_pending_error and launch_status, so its Status is as described there.
Status launch_programmatic(const char* what, const void* kernel, const void* desc,
                           size_t desc_bytes, unsigned blocks, unsigned threads,
                           cudaStream_t stream, int ordinal) noexcept;

// The same for a grid of any shape with `shared_bytes` of dynamic shared memory.
Status launch_programmatic(const char* what, const void* kernel, const void* desc,
                           size_t desc_bytes, dim3 grid, unsigned threads, size_t shared_bytes,
                           cudaStream_t stream, int ordinal) noexcept;

}  // namespace kvq::cuda
