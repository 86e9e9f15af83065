#pragma once
// kvq::DeviceRuntime for one CUDA device: the memory, copies and timing that `kvq bench`,
// `kvq write/read` and kvq-demo use through the plugin, so that none of them links CUDA.
// This header names no CUDA type (the stream and events are the runtime API's opaque structs),
// so plain C++ files (the plugin entry, tests) can include it.
#include <string>
#include <vector>

#include "kvq/core/device_runtime.h"
#include "kvq/core/registry.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace kvq::cuda {

// Every call makes the runtime's device current for its duration (and restores the caller's).
// Copies and fills run on the runtime's own non-blocking stream: fill() and device-to-device
// copy() are stream-ordered and return at once; copies that touch host memory return when the
// host buffer may be reused or read.
class CudaDeviceRuntime final : public DeviceRuntime {
 public:
  // Opens device `ordinal`: checks it exists, creates the stream. Errors: unavailable (no such
  // device, no driver), runtime (any other CUDA failure).
  static Status create(int ordinal, CudaDeviceRuntime** out) noexcept;
  ~CudaDeviceRuntime() override;
  CudaDeviceRuntime(const CudaDeviceRuntime&) = delete;
  CudaDeviceRuntime& operator=(const CudaDeviceRuntime&) = delete;

  Device device() const noexcept override { return Device::cuda(ordinal_); }
  // "NVIDIA H200 (cuda:0, compute capability 9.0, 132 SMs)"
  std::string device_name() const noexcept override { return name_; }
  void* stream() const noexcept override { return stream_; }

  Status allocate(std::size_t bytes, void** out) noexcept override;
  Status release(void* ptr) noexcept override;
  Status copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) noexcept override;
  Status fill(void* dst, uint8_t byte, std::size_t bytes) noexcept override;
  Status synchronize() noexcept override;

  // Direct mode: options.warmup launches, then each timed launch between its own pair of events;
  // one synchronize at the end, so the host queues ahead exactly as an engine does.
  // Graph mode: options.warmup direct launches (module loading stays out of the capture), then
  // graphs_captured() graphs, captured from the launches, so that a context that takes the
  // next input set at every launch keeps rotating through replays; all are uploaded. Each graph
  // holds options.launches_per_graph launches and a replay's time is reported per launch. The first
  // warmup_graphs() are replayed as warm-up; the timed replays cycle over the others, each
  // between its own pair of events, so that up to kMaxGraphs iterations each replay a graph
  // (and read inputs) that nothing has touched since its capture.
  Status time(LaunchFn launch, void* context, const TimingOptions& options,
              std::vector<double>* milliseconds) noexcept override;

  // Median over kCopyRepeats timed cudaMemcpyAsync of `bytes` between two fresh buffers (after
  // two warm-up copies), as (read + written bytes) per second.
  Status copy_bandwidth(std::size_t bytes, double* bytes_per_second) noexcept override;

  static constexpr int kMaxGraphs = 64;       // timed graphs (more iterations cycle over them)
  static constexpr int kMaxWarmupGraphs = 8;  // graphs replayed only as warm-up
  static int warmup_graphs(const TimingOptions& o) {
    return o.warmup < kMaxWarmupGraphs ? o.warmup : kMaxWarmupGraphs;
  }
  static int graphs_captured(const TimingOptions& o) {
    return warmup_graphs(o) + (o.iterations < kMaxGraphs ? o.iterations : kMaxGraphs);
  }
  static constexpr int kCopyRepeats = 10;

 private:
  CudaDeviceRuntime(int ordinal, std::string name, CUstream_st* stream)
      : ordinal_(ordinal), name_(std::move(name)), stream_(stream) {}

  Status time_direct(LaunchFn launch, void* context, const TimingOptions& options,
                     std::vector<double>* milliseconds) noexcept;
  Status time_graph(LaunchFn launch, void* context, const TimingOptions& options,
                    std::vector<double>* milliseconds) noexcept;

  int ordinal_;
  std::string name_;
  CUstream_st* stream_;
};

}  // namespace kvq::cuda

namespace kvq {

// The plugin's create_runtime: the device of options.device (cuda:0 when unset). A CPU device is
// invalid_argument; a missing CUDA device is unavailable. On success *out owns a new runtime.
Status make_cuda_device_runtime(const BackendOptions& options, DeviceRuntime** out) noexcept;

}  // namespace kvq
