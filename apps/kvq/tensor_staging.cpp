#include "tensor_staging.h"

#include <fmt/format.h>

#include <string>

namespace kvq::app {
namespace {

std::size_t byte_size(const TensorView& v) {
  return static_cast<std::size_t>(v.numel() * dtype_size(v.dtype));
}

// `doing` names the step and the tensor: "copying key to the device".
void check(const Status& s, const std::string& doing) {
  if (!s) throw Error(s.code(), fmt::format("{}: {}", doing, s.message()));
}

}  // namespace

TensorStaging::TensorStaging(std::shared_ptr<DeviceRuntime> runtime)
    : runtime_(std::move(runtime)) {}

TensorView TensorStaging::upload(const TensorView& host, const char* what) {
  if (!host.is_contiguous() || host.device != Device::cpu()) {
    throw Error(ErrorCode::internal, fmt::format("staging {}: expected a contiguous host view, "
                                                 "found {}",
                                                 what, host.describe()));
  }
  const Device d = runtime_->device();
  if (d == Device::cpu()) return host;
  TensorView out = host;
  out.device = d;
  const std::size_t bytes = byte_size(host);
  owned_.emplace_back(runtime_, bytes == 0 ? 1 : bytes, what);
  void* p = owned_.back().data();
  out.data = p;
  if (bytes > 0) {
    check(runtime_->copy(p, host.data, bytes, CopyKind::host_to_device),
          fmt::format("copying {} to the device", what));
  }
  return out;
}

void TensorStaging::download(const TensorView& device_view, const TensorView& host,
                             const char* what) {
  check(runtime_->synchronize(),
        fmt::format("waiting for the device before copying {} back", what));
  if (device_view.data == host.data) return;  // the CPU: written in place
  const std::size_t bytes = byte_size(host);
  if (bytes > 0) {
    check(runtime_->copy(host.data, device_view.data, bytes, CopyKind::device_to_host),
          fmt::format("copying {} back from the device", what));
  }
  check(runtime_->synchronize(), fmt::format("waiting for the copy of {}", what));
}

}  // namespace kvq::app
