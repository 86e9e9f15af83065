#pragma once
// Memory on a backend's device, through its DeviceRuntime: the one owner of such memory, so that
// a program (kvq write/read/bench, kvq-demo, an engine) stages tensors without calling a GPU API
// itself. Move-only; released when destroyed. It holds its runtime, which stays alive with it.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvq/core/device_runtime.h"
#include "kvq/core/export.h"

namespace kvq {

class KVQ_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws kvq::Error naming `what` when the allocation fails: "allocating WHAT (N bytes): ...".
  DeviceBuffer(std::shared_ptr<DeviceRuntime> runtime, std::size_t bytes, const char* what);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  // Host -> this buffer and back; `bytes` must not exceed bytes(). Throw kvq::Error on failure.
  // download() synchronizes the runtime before it returns.
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  void fill(uint8_t byte);

 private:
  void reset() noexcept;

  std::shared_ptr<DeviceRuntime> runtime_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  const char* what_ = "";
};

}  // namespace kvq
