#include "kvq/core/device_buffer.h"

#include <fmt/format.h>

#include <utility>

#include "kvq/core/logging.h"

namespace kvq {

namespace {

void check(const Status& s, const char* op, const char* what, std::size_t bytes) {
  if (!s) {
    throw Error(s.code(), fmt::format("{} {} ({} bytes): {}", op, what, bytes, s.message()));
  }
}

void check_size(std::size_t asked, std::size_t have, const char* what) {
  if (asked > have) {
    throw Error(ErrorCode::internal,
                fmt::format("{}: {} bytes asked of a {}-byte buffer", what, asked, have));
  }
}

}  // namespace

DeviceBuffer::DeviceBuffer(std::shared_ptr<DeviceRuntime> runtime, std::size_t bytes,
                           const char* what)
    : runtime_(std::move(runtime)), bytes_(bytes), what_(what) {
  check(runtime_->allocate(bytes, &data_), "allocating", what, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : runtime_(std::move(other.runtime_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      what_(other.what_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    runtime_ = std::move(other.runtime_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    what_ = other.what_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  reset();
}

void DeviceBuffer::reset() noexcept {
  if (data_ && runtime_) {
    const Status s = runtime_->release(data_);
    if (!s) KVQ_LOG_WARN("releasing {}: {}", what_, s.message());
  }
  data_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check_size(bytes, bytes_, what_);
  check(runtime_->copy(data_, host, bytes, CopyKind::host_to_device), "copying to", what_, bytes);
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check_size(bytes, bytes_, what_);
  check(runtime_->copy(host, data_, bytes, CopyKind::device_to_host), "copying from", what_, bytes);
  // A runtime may copy asynchronously on its stream: the host reads `host` next.
  check(runtime_->synchronize(), "synchronizing after copying from", what_, bytes);
}

void DeviceBuffer::fill(uint8_t byte) {
  check(runtime_->fill(data_, byte, bytes_), "filling", what_, bytes_);
}

}  // namespace kvq
