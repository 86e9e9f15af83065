#pragma once
// Host <-> device staging for `kvq write` and `kvq read`: the one place where a command's tensors
// move between host memory (safetensors files) and the device a backend works on. On a CPU
// backend nothing moves (the views are the host buffers); on any other device the tensors are
// copied into DeviceBuffers (core) through the backend's DeviceRuntime, so the program links no
// GPU API.
#include <memory>
#include <vector>

#include "kvq/core/device_buffer.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/tensor_view.h"

namespace kvq::app {

class TensorStaging {
 public:
  explicit TensorStaging(std::shared_ptr<DeviceRuntime> runtime);
  TensorStaging(const TensorStaging&) = delete;
  TensorStaging& operator=(const TensorStaging&) = delete;

  Device device() const { return runtime_->device(); }
  void* stream() const { return runtime_->stream(); }

  // `host` (a contiguous host view) on the device: `host` itself on the CPU, else a new copy.
  // Throws kvq::Error naming `what` on failure.
  TensorView upload(const TensorView& host, const char* what);

  // Copies a view upload() returned back into `host`, after waiting for the work on the device.
  void download(const TensorView& device_view, const TensorView& host, const char* what);

 private:
  std::shared_ptr<DeviceRuntime> runtime_;
  std::vector<DeviceBuffer> owned_;  // the device copies
};

}  // namespace kvq::app
