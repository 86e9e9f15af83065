#include <chrono>
#include <cstring>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "kvq/core/device_runtime.h"
#include "kvq/core/median.h"

namespace kvq {
namespace {

// Host memory and steady-clock timing: what CPU backends run on.
class HostRuntime final : public DeviceRuntime {
 public:
  Device device() const noexcept override { return Device::cpu(); }
  std::string device_name() const noexcept override {
    return "CPU (" + std::to_string(std::thread::hardware_concurrency()) + " hardware threads)";
  }
  void* stream() const noexcept override { return nullptr; }

  Status allocate(std::size_t bytes, void** out) noexcept override {
    *out = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{64}, std::nothrow);
    if (!*out)
      return {ErrorCode::runtime,
              "out of host memory allocating " + std::to_string(bytes) + " bytes"};
    return Status::ok();
  }
  Status release(void* ptr) noexcept override {
    ::operator delete (ptr, std::align_val_t{64});
    return Status::ok();
  }
  Status copy(void* dst, const void* src, std::size_t bytes, CopyKind) noexcept override {
    if (bytes) std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status fill(void* dst, uint8_t byte, std::size_t bytes) noexcept override {
    if (bytes) std::memset(dst, byte, bytes);
    return Status::ok();
  }
  Status synchronize() noexcept override { return Status::ok(); }

  Status time(LaunchFn launch, void* context, const TimingOptions& options,
              std::vector<double>* milliseconds) noexcept override {
    if (options.graph) return {ErrorCode::unavailable, "graph replay: not a GPU runtime"};
    milliseconds->clear();
    for (int i = 0; i < options.warmup; ++i) {
      if (Status s = launch(context, nullptr); !s) return s;
    }
    for (int i = 0; i < options.iterations; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status s = launch(context, nullptr); !s) return s;
      auto t1 = std::chrono::steady_clock::now();
      milliseconds->push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return Status::ok();
  }

  Status copy_bandwidth(std::size_t bytes, double* bytes_per_second) noexcept override {
    return catch_as_status([&] {
      // The median of timed copies, as the GPU runtimes measure theirs (and as the bench's JSON
      // says): one slow copy (a page fault, another process) moves it no more than a fast one.
      std::vector<unsigned char> a(bytes, 1), b(bytes, 0);
      std::memcpy(b.data(), a.data(), bytes);  // touch both
      std::vector<double> rates;
      for (int i = 0; i < 9; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        auto t1 = std::chrono::steady_clock::now();
        double s = std::chrono::duration<double>(t1 - t0).count();
        rates.push_back(s > 0 ? 2.0 * static_cast<double>(bytes) / s : 0.0);
      }
      *bytes_per_second = median(std::move(rates));
    });
  }
};

}  // namespace

DeviceRuntime& host_runtime() {
  static HostRuntime runtime;
  return runtime;
}

}  // namespace kvq
