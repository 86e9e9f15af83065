// CudaDeviceRuntime (backends/cuda), the runtime `kvq bench` times the GPU writer with.
// Label gpu: the device tests skip with a message when no CUDA device is present; the refusals
// (CPU device, missing device) run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cuda_device_runtime.h"

namespace kvq {
namespace {

bool have_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}

std::unique_ptr<DeviceRuntime> open_runtime() {
  BackendOptions o;
  DeviceRuntime* rt = nullptr;
  Status s = make_cuda_device_runtime(o, &rt);
  EXPECT_TRUE(s) << s.message();
  return std::unique_ptr<DeviceRuntime>(rt);
}

TEST(CudaDeviceRuntime, RefusesACpuDevice) {
  BackendOptions o;
  o.device = Device::cpu();
  DeviceRuntime* rt = reinterpret_cast<DeviceRuntime*>(0x1);
  const Status s = make_cuda_device_runtime(o, &rt);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(),
            "cuda runtime: device cpu requested; this backend works on CUDA devices only "
            "(cuda:N)");
  EXPECT_EQ(rt, nullptr);
}

TEST(CudaDeviceRuntime, AMissingDeviceIsUnavailable) {
  BackendOptions o;
  o.device = Device::cuda(device_count());  // one past the last
  DeviceRuntime* rt = nullptr;
  const Status s = make_cuda_device_runtime(o, &rt);
  EXPECT_EQ(s.code(), ErrorCode::unavailable) << s.message();
  EXPECT_EQ(rt, nullptr);
  if (have_device()) {
    EXPECT_NE(s.message().find("requested, but this machine has"), std::string::npos)
        << s.message();
  }
}

class CudaRuntimeOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device: CudaDeviceRuntime not exercised";
    rt_ = open_runtime();
    ASSERT_TRUE(rt_);
  }
  std::unique_ptr<DeviceRuntime> rt_;
};

TEST_F(CudaRuntimeOnDevice, NamesItsDevice) {
  EXPECT_EQ(rt_->device(), Device::cuda(0));
  EXPECT_NE(rt_->device_name().find("(cuda:0, compute capability "), std::string::npos)
      << rt_->device_name();
  EXPECT_NE(rt_->stream(), nullptr) << "its own stream, not the legacy default stream";
}

TEST_F(CudaRuntimeOnDevice, FillAndCopiesRoundTrip) {
  constexpr size_t n = (size_t{3} << 20) + 5;
  void *a = nullptr, *b = nullptr;
  ASSERT_TRUE(rt_->allocate(n, &a));
  ASSERT_TRUE(rt_->allocate(n, &b));
  std::vector<uint8_t> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE(rt_->fill(b, 0xAB, n));
  ASSERT_TRUE(rt_->copy(back.data(), b, n, CopyKind::device_to_host));
  EXPECT_EQ(back, std::vector<uint8_t>(n, 0xAB));
  ASSERT_TRUE(rt_->copy(a, host.data(), n, CopyKind::host_to_device));
  ASSERT_TRUE(rt_->copy(b, a, n, CopyKind::device_to_device));
  ASSERT_TRUE(rt_->copy(back.data(), b, n, CopyKind::device_to_host));
  EXPECT_EQ(back, host);
  EXPECT_TRUE(rt_->release(a));
  EXPECT_TRUE(rt_->release(b));
}

TEST_F(CudaRuntimeOnDevice, AnImpossibleAllocationSaysSoAndLeavesNoError) {
  void* p = nullptr;
  const Status s = rt_->allocate(size_t{1} << 50, &p);
  EXPECT_EQ(s.code(), ErrorCode::runtime);
  EXPECT_NE(s.message().find("cudaMalloc(1125899906842624 bytes) on cuda:0 failed: "),
            std::string::npos)
      << s.message();
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a later launch check must not see it";
}

// A launch that clears a 64 MiB buffer on the runtime's stream, counting its calls.
struct MemsetLaunch {
  void* buffer = nullptr;
  size_t bytes = size_t{64} << 20;
  int calls = 0;
  int fail_at = -1;  // return an error from this call
  static Status launch(void* context, void* stream) noexcept {
    auto* m = static_cast<MemsetLaunch*>(context);
    if (m->calls++ == m->fail_at) return {ErrorCode::invalid_argument, "launch refused"};
    if (cudaMemsetAsync(m->buffer, m->calls & 0xFF, m->bytes, static_cast<cudaStream_t>(stream)) !=
        cudaSuccess) {
      return {ErrorCode::runtime, "cudaMemsetAsync failed"};
    }
    return Status::ok();
  }
};

TEST_F(CudaRuntimeOnDevice, TimesDirectLaunchesWithEvents) {
  MemsetLaunch m;
  ASSERT_TRUE(rt_->allocate(m.bytes, &m.buffer));
  std::vector<double> ms;
  const Status s = rt_->time(&MemsetLaunch::launch, &m, TimingOptions{3, 20, false}, &ms);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(m.calls, 23);
  ASSERT_EQ(ms.size(), 20u);
  for (double t : ms) {
    EXPECT_GT(t, 0.0);
    EXPECT_LT(t, 100.0) << "64 MiB memset";
  }
  EXPECT_TRUE(rt_->release(m.buffer));
}

TEST_F(CudaRuntimeOnDevice, TimesGraphReplaysOfSeveralCaptures) {
  MemsetLaunch m;
  ASSERT_TRUE(rt_->allocate(m.bytes, &m.buffer));
  std::vector<double> ms;
  const Status s = rt_->time(&MemsetLaunch::launch, &m, TimingOptions{2, 50, true, 1}, &ms);
  ASSERT_TRUE(s) << s.message();
  // 2 direct warm-ups, then one capture per graph: 2 warm-up graphs + 50 timed ones; replays
  // call nothing.
  const TimingOptions o{2, 50, true, 1};
  EXPECT_EQ(cuda::CudaDeviceRuntime::graphs_captured(o), 52);
  EXPECT_EQ(m.calls, 2 + 52);
  ASSERT_EQ(ms.size(), 50u);
  for (double t : ms) EXPECT_GT(t, 0.0);
  // The last replay wrote the value of its capture: the buffer holds a launch's byte.
  uint8_t first = 0;
  ASSERT_TRUE(rt_->copy(&first, m.buffer, 1, CopyKind::device_to_host));
  EXPECT_GE(first, 3);
  m.calls = 0;
  ASSERT_TRUE(rt_->time(&MemsetLaunch::launch, &m, TimingOptions{20, 100, true, 1}, &ms));
  EXPECT_EQ(m.calls, 20 + 8 + 64) << "warm-up graphs and timed graphs are capped";
  EXPECT_EQ(ms.size(), 100u);
  EXPECT_TRUE(rt_->release(m.buffer));
}

TEST_F(CudaRuntimeOnDevice, GraphsHoldSeveralLaunchesAndReportPerLaunch) {
  MemsetLaunch m;
  ASSERT_TRUE(rt_->allocate(m.bytes, &m.buffer));
  std::vector<double> one, four;
  ASSERT_TRUE(rt_->time(&MemsetLaunch::launch, &m, TimingOptions{2, 20, true, 1}, &one));
  m.calls = 0;
  ASSERT_TRUE(rt_->time(&MemsetLaunch::launch, &m, TimingOptions{2, 20, true, 4}, &four));
  // 2 direct warm-ups, then 2 warm-up graphs + 20 timed graphs of 4 launches each.
  EXPECT_EQ(m.calls, 2 + 22 * 4);
  ASSERT_EQ(four.size(), 20u);
  // A 64 MiB memset is device-bound: per launch, a graph of 4 takes about what a graph of 1 does.
  std::sort(one.begin(), one.end());
  std::sort(four.begin(), four.end());
  EXPECT_LT(four[10], one[10] * 1.5);
  EXPECT_GT(four[10], one[10] * 0.5);
  EXPECT_TRUE(rt_->release(m.buffer));
}

TEST_F(CudaRuntimeOnDevice, ALaunchErrorStopsTimingAndLeavesTheStreamUsable) {
  MemsetLaunch m;
  ASSERT_TRUE(rt_->allocate(m.bytes, &m.buffer));
  std::vector<double> ms;
  m.fail_at = 4;
  Status s = rt_->time(&MemsetLaunch::launch, &m, TimingOptions{2, 10, false}, &ms);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "launch refused");
  m.calls = 0;
  m.fail_at = 3;  // the second capture (after 2 warm-ups)
  s = rt_->time(&MemsetLaunch::launch, &m, TimingOptions{2, 10, true, 1}, &ms);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "during CUDA graph capture: launch refused");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(static_cast<cudaStream_t>(rt_->stream()), &capture), cudaSuccess);
  EXPECT_EQ(capture, cudaStreamCaptureStatusNone) << "capture ended";
  EXPECT_TRUE(rt_->synchronize());
  m.fail_at = -1;
  s = rt_->time(&MemsetLaunch::launch, &m, TimingOptions{1, 2, false}, &ms);
  EXPECT_TRUE(s) << s.message();
  EXPECT_EQ(rt_->time(&MemsetLaunch::launch, &m, TimingOptions{1, 0, false}, &ms).code(),
            ErrorCode::invalid_argument);
  EXPECT_TRUE(rt_->release(m.buffer));
}

TEST_F(CudaRuntimeOnDevice, CopyBandwidthIsPlausible) {
  double bps = 0;
  const Status s = rt_->copy_bandwidth(size_t{256} << 20, &bps);
  ASSERT_TRUE(s) << s.message();
  // Any CUDA GPU of the last decade copies faster than 100 GB/s and slower than 20 TB/s.
  EXPECT_GT(bps, 100e9);
  EXPECT_LT(bps, 20e12);
  EXPECT_EQ(rt_->copy_bandwidth(0, &bps).code(), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace kvq
