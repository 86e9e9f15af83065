#pragma once
// A DeviceRuntime on host memory for tests of the programs' device-facing code (the bench
// runner, tensor staging) without a plugin or a GPU. It can claim to be a CUDA device, so the
// copy path runs, and each kind of call can be made to fail. Each timed direct launch "takes"
// 2 ms and each graph replay 1 ms; graph mode calls the launch once per iteration, as captures do.
#include <cstring>
#include <new>
#include <vector>

#include "kvq/core/device_runtime.h"

namespace kvq::testing {

class FakeRuntime final : public DeviceRuntime {
 public:
  explicit FakeRuntime(Device d = Device::cpu()) : device_(d) {}

  Device device() const noexcept override { return device_; }
  std::string device_name() const noexcept override { return "fake"; }
  void* stream() const noexcept override { return nullptr; }
  Status allocate(std::size_t bytes, void** out) noexcept override {
    if (fail_allocate) return {ErrorCode::runtime, "fake: out of memory"};
    *out = ::operator new(bytes == 0 ? 1 : bytes);
    live += 1;
    return Status::ok();
  }
  Status release(void* p) noexcept override {
    ::operator delete(p);
    live -= 1;
    return Status::ok();
  }
  Status copy(void* d, const void* s, std::size_t n, CopyKind kind) noexcept override {
    if (fail_copy) return {ErrorCode::runtime, "fake: copy failed"};
    std::memcpy(d, s, n);
    copies.push_back({kind, n});
    return Status::ok();
  }
  Status fill(void* d, uint8_t b, std::size_t n) noexcept override {
    std::memset(d, b, n);
    fills += 1;
    return Status::ok();
  }
  Status synchronize() noexcept override {
    syncs += 1;
    if (fail_synchronize) return {ErrorCode::runtime, "fake: the device faulted"};
    return Status::ok();
  }
  Status time(LaunchFn launch, void* context, const TimingOptions& o,
              std::vector<double>* ms) noexcept override {
    options.push_back(o);
    ms->clear();
    for (int i = 0; i < o.warmup + o.iterations; ++i) {
      if (Status s = launch(context, nullptr); !s) return s;
      if (i >= o.warmup) ms->push_back(o.graph ? 1.0 : 2.0);
    }
    return Status::ok();
  }
  Status copy_bandwidth(std::size_t bytes, double* bps) noexcept override {
    *bps = 1e12;
    copied.push_back(bytes);
    return Status::ok();
  }

  struct Copy {
    CopyKind kind;
    std::size_t bytes;
  };
  bool fail_allocate = false;
  bool fail_copy = false;
  bool fail_synchronize = false;
  std::vector<Copy> copies;         // every copy(), in order
  std::vector<std::size_t> copied;  // sizes asked of copy_bandwidth
  std::vector<TimingOptions> options;
  int live = 0;  // allocations not yet released
  int fills = 0;
  int syncs = 0;

 private:
  Device device_;
};

}  // namespace kvq::testing
