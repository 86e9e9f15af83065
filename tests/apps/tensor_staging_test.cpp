// kvq write/read's host <-> device staging (apps/kvq/tensor_staging.cpp) on a fake runtime: on
// the CPU nothing moves; on a device every tensor is copied once each way, with exactly its
// bytes; every failure names the tensor and the step, and no device buffer outlives the staging.
#include "tensor_staging.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "fake_runtime.h"

namespace kvq::app {
namespace {

using kvq::testing::FakeRuntime;

// Runs f, which must throw kvq::Error; returns it.
template <class F>
Error thrown_by(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a kvq::Error";
  return Error(ErrorCode::ok, "");
}

struct Host {
  std::vector<uint16_t> bytes = std::vector<uint16_t>(2 * 3 * 4);
  Host() { std::iota(bytes.begin(), bytes.end(), uint16_t{100}); }
  // [2, 3, 4] bf16, contiguous
  TensorView view() { return make_view(bytes.data(), DType::bf16, {2, 3, 4}); }
};

TEST(TensorStaging, OnTheCpuTheHostBuffersAreUsedInPlace) {
  auto rt = std::make_shared<FakeRuntime>(Device::cpu());
  Host h;
  {
    TensorStaging staging(rt);
    const TensorView v = staging.upload(h.view(), "key");
    EXPECT_EQ(v.data, h.bytes.data());
    EXPECT_EQ(v.device, Device::cpu());
    staging.download(v, h.view(), "key");
  }
  EXPECT_EQ(rt->live, 0);
  EXPECT_TRUE(rt->copies.empty()) << "nothing moves on the CPU";
  EXPECT_GE(rt->syncs, 1) << "a download still waits for the writer";
}

TEST(TensorStaging, OnADeviceEachTensorIsCopiedOnceEachWayWithItsBytes) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  Host h;
  {
    TensorStaging staging(rt);
    const TensorView d = staging.upload(h.view(), "key");
    EXPECT_NE(d.data, h.bytes.data());
    EXPECT_EQ(d.device, Device::cuda(0));
    EXPECT_EQ(d.dtype, DType::bf16);
    EXPECT_EQ(d.ndim, 3);
    EXPECT_EQ(d.size(0), 2);
    EXPECT_EQ(d.size(2), 4);
    EXPECT_EQ(rt->live, 1);
    ASSERT_EQ(rt->copies.size(), 1u);
    EXPECT_EQ(rt->copies[0].kind, CopyKind::host_to_device);
    EXPECT_EQ(rt->copies[0].bytes, 2u * 3 * 4 * 2);
    EXPECT_EQ(d.ptr<uint16_t>()[23], 123) << "the device copy holds the host's values";

    d.ptr<uint16_t>()[5] = 7;  // "the writer" changes the device copy
    staging.download(d, h.view(), "key");
    EXPECT_EQ(h.bytes[5], 7) << "the download brings it back";
    ASSERT_EQ(rt->copies.size(), 2u);
    EXPECT_EQ(rt->copies[1].kind, CopyKind::device_to_host);
    EXPECT_EQ(rt->copies[1].bytes, 48u);
  }
  EXPECT_EQ(rt->live, 0) << "the destructor releases every device copy";
}

TEST(TensorStaging, AnEmptyTensorGetsABufferButNoCopy) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  {
    TensorStaging staging(rt);
    uint16_t none = 0;
    const TensorView host = make_view(&none, DType::bf16, {0, 3, 4});
    const TensorView d = staging.upload(host, "key");
    EXPECT_NE(d.data, nullptr) << "a backend may still check the pointer";
    staging.download(d, host, "key");
  }
  EXPECT_TRUE(rt->copies.empty());
  EXPECT_EQ(rt->live, 0);
}

TEST(TensorStaging, OnlyContiguousHostViewsAreStaged) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  Host h;
  TensorStaging staging(rt);
  TensorView strided = h.view();
  strided.shape[2] = 2;  // every other element of the last dimension
  strided.strides[1] = 4;
  const Error e = thrown_by([&] { staging.upload(strided, "value"); });
  EXPECT_EQ(e.code(), ErrorCode::internal);
  EXPECT_NE(std::string(e.what()).find("staging value: expected a contiguous host view"),
            std::string::npos)
      << e.what();

  TensorView on_device = h.view();
  on_device.device = Device::cuda(0);
  EXPECT_THROW(staging.upload(on_device, "value"), Error);
  EXPECT_TRUE(rt->copies.empty());
  EXPECT_EQ(rt->live, 0);
}

TEST(TensorStaging, AFailedAllocationNamesTheTensor) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  rt->fail_allocate = true;
  Host h;
  TensorStaging staging(rt);
  const Error e = thrown_by([&] { staging.upload(h.view(), "slot_mapping"); });
  EXPECT_EQ(e.code(), ErrorCode::runtime);
  EXPECT_STREQ(e.what(), "allocating slot_mapping (48 bytes): fake: out of memory");
}

TEST(TensorStaging, AFailedUploadStillReleasesItsBuffer) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  rt->fail_copy = true;
  Host h;
  {
    TensorStaging staging(rt);
    const Error e = thrown_by([&] { staging.upload(h.view(), "key"); });
    EXPECT_STREQ(e.what(), "copying key to the device: fake: copy failed");
    EXPECT_EQ(rt->live, 1);
  }
  EXPECT_EQ(rt->live, 0);
}

TEST(TensorStaging, ADeviceFaultBeforeTheDownloadLeavesTheHostBufferAlone) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  Host h;
  TensorStaging staging(rt);
  const TensorView d = staging.upload(h.view(), "cache");
  d.ptr<uint16_t>()[0] = 9;
  rt->fail_synchronize = true;
  const Error e = thrown_by([&] { staging.download(d, h.view(), "cache"); });
  EXPECT_EQ(e.code(), ErrorCode::runtime);
  EXPECT_STREQ(e.what(),
               "waiting for the device before copying cache back: fake: the device faulted");
  EXPECT_EQ(h.bytes[0], 100) << "no bytes of a faulted write reach the host";
  EXPECT_EQ(rt->copies.size(), 1u) << "the upload only";
}

TEST(TensorStaging, AFailedDownloadNamesTheTensor) {
  auto rt = std::make_shared<FakeRuntime>(Device::cuda(0));
  Host h;
  TensorStaging staging(rt);
  const TensorView d = staging.upload(h.view(), "cache");
  rt->fail_copy = true;
  const Error e = thrown_by([&] { staging.download(d, h.view(), "cache"); });
  EXPECT_STREQ(e.what(), "copying cache back from the device: fake: copy failed");
}

}  // namespace
}  // namespace kvq::app
