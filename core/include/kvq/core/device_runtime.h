#pragma once
// Device memory, copies and timing, provided by a backend plugin for the device its writers use.
// It keeps the programs (kvq write/read/bench, kvq-demo) free of any GPU API: they stage tensors
// and time writes through this interface, and a new kind of backend brings its own runtime.
// CPU backends need none: host_runtime() (core) serves host memory and steady-clock timing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/export.h"
#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

enum class CopyKind : int32_t { host_to_device = 0, device_to_host = 1, device_to_device = 2 };

// One timed piece of work: launches asynchronously on `stream` (the runtime's), returns its status.
using LaunchFn = Status (*)(void* context, void* stream) noexcept;

struct TimingOptions {
  int32_t warmup = 5;
  int32_t iterations = 50;
  bool graph = false;  // capture launches into CUDA graphs and time their replays
  // Graph mode: launches captured into each graph. An engine captures a whole decode step, one
  // write per layer, into one graph, so a write's cost there is a replay's time / launches; a
  // graph of one launch would time the host's graph-launch call instead of the write.
  int32_t launches_per_graph = 16;
};

class KVQ_API DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual Device device() const noexcept = 0;
  virtual std::string device_name()
      const noexcept = 0;                     // "NVIDIA H200 (sm_90)" / "CPU (2 threads)"
  virtual void* stream() const noexcept = 0;  // the stream writes should use

  virtual Status allocate(std::size_t bytes, void** out) noexcept = 0;
  virtual Status release(void* ptr) noexcept = 0;
  virtual Status copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) noexcept = 0;
  virtual Status fill(void* dst, uint8_t byte, std::size_t bytes) noexcept = 0;
  virtual Status synchronize() noexcept = 0;

  // Calls launch(context, stream()) options.warmup + options.iterations times and returns the
  // duration of each timed iteration in milliseconds (device events on GPUs; a steady clock and
  // a synchronize on CPUs). With options.graph, each iteration is one replay of a graph holding
  // options.launches_per_graph launches, reported per launch (replay time / launches);
  // unsupported -> ErrorCode::unavailable.
  virtual Status time(LaunchFn launch, void* context, const TimingOptions& options,
                      std::vector<double>* milliseconds) noexcept = 0;

  // Measures this device's device-to-device copy bandwidth (bytes read + bytes written per
  // second) with `bytes`-sized buffers: the ceiling a memory-bound write is compared with.
  virtual Status copy_bandwidth(std::size_t bytes, double* bytes_per_second) noexcept = 0;
};

// The runtime for host memory (a process-wide object owned by core).
KVQ_API DeviceRuntime& host_runtime();

}  // namespace kvq
