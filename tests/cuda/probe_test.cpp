// The probe answers on any machine: unavailable with the reason where there is no usable CUDA
// device (CI), available with the device, its compute capability and the E2M1 path otherwise.
#include "probe.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace kvq::cuda {
namespace {

TEST(Probe, ReportsTheDeviceOrWhyThereIsNone) {
  ProbeResult r;
  ASSERT_TRUE(probe(&r).is_ok());
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  if (err == cudaErrorInsufficientDriver && driver == 0) {
    EXPECT_FALSE(r.available);
    EXPECT_EQ(r.reason,
              "no CUDA device: no NVIDIA driver is loaded (cudaErrorInsufficientDriver, driver "
              "version 0)");
  } else if (err == cudaErrorInsufficientDriver) {
    EXPECT_FALSE(r.available);
    EXPECT_EQ(r.reason.rfind("driver too old: ", 0), 0u) << r.reason;
  } else if (err != cudaSuccess || count == 0) {
    EXPECT_FALSE(r.available);
    EXPECT_EQ(r.reason.rfind("no CUDA device: ", 0), 0u) << r.reason;
    EXPECT_EQ(r.score, 0);
  } else {
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major >= 9) {
      EXPECT_TRUE(r.available) << r.reason;
      EXPECT_EQ(r.score, kProbeScore);
      EXPECT_NE(r.reason.find(prop.name), std::string::npos) << r.reason;
      EXPECT_NE(r.reason.find("compute capability " + std::to_string(prop.major) + "." +
                              std::to_string(prop.minor)),
                std::string::npos)
          << r.reason;
      EXPECT_NE(r.reason.find(" E2M1"), std::string::npos) << r.reason;
    }
  }
  std::cout << "probe: " << (r.available ? "available" : "unavailable") << ": " << r.reason << "\n";
}

}  // namespace
}  // namespace kvq::cuda
