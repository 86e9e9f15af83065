#include "probe.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda_util.h"
#include "hw_e2m1_check.h"
#include "kvq/core/logging.h"
#include "write_kernel.h"

namespace kvq::cuda {
namespace {

Status unavailable(std::string message) {
  return {ErrorCode::unavailable, std::move(message)};
}

std::string version_text(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

}  // namespace

Status cuda_device_count(int* count) noexcept {
  const cudaError_t err = cudaGetDeviceCount(count);
  if (err == cudaSuccess && *count > 0) return Status::ok();
  (void)cudaGetLastError();
  if (err == cudaErrorInsufficientDriver) {
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    if (driver == 0) {
      return unavailable(
          "no CUDA device: no NVIDIA driver is loaded (cudaErrorInsufficientDriver, driver "
          "version 0)");
    }
    return unavailable(fmt::format(
        "driver too old: the installed NVIDIA driver supports CUDA {}, this plugin was built with "
        "CUDA {} (cudaErrorInsufficientDriver)",
        version_text(driver), version_text(CUDART_VERSION)));
  }
  if (err == cudaSuccess) return unavailable("no CUDA device: cudaGetDeviceCount found 0 devices");
  return unavailable(
      fmt::format("no CUDA device: {} ({})", cudaGetErrorString(err), cudaGetErrorName(err)));
}

Status open_device(int ordinal, DeviceInfo* out) noexcept {
  return catch_as_status([&] {
    int count = 0;
    throw_if_error(cuda_device_count(&count));
    if (ordinal < 0 || ordinal >= count) {
      throw Error(unavailable(fmt::format("cuda:{} does not exist: {} CUDA device{} found", ordinal,
                                          count, count == 1 ? "" : "s")));
    }
    cudaDeviceProp prop{};
    if (cudaError_t err = cudaGetDeviceProperties(&prop, ordinal); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaGetDeviceProperties", ordinal));
    }
    DeviceInfo info;
    info.ordinal = ordinal;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.num_sms = prop.multiProcessorCount;
    info.description = describe_device(prop, ordinal);
    if (prop.major < 9) {
      throw Error(
          unavailable(fmt::format("compute capability {}.{} < 9.0: {} (cuda needs "
                                  "Hopper sm_90 or newer)",
                                  prop.major, prop.minor, info.description)));
    }
    {
      DeviceGuard guard(ordinal);
      if (guard.error() != cudaSuccess) {
        throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
      }
      std::string why;
      if (const auto err = static_cast<cudaError_t>(write_kernel_loadable(&why));
          err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction ||
          err == cudaErrorUnsupportedPtxVersion) {
        throw Error(unavailable(
            fmt::format("no kernel image for {}: this build has sm_90a and sm_100a code only ({})",
                        info.description, why)));
      } else if (err != cudaSuccess) {
        // E.g. a kernel of this process faulted earlier: the context is unusable until reset.
        throw Error(unavailable(fmt::format(
            "cannot load the write kernel on {}: {} (an earlier failure on this device?)",
            info.description, why)));
      }
    }
    HwE2m1Verdict verdict;
    throw_if_error(check_hw_e2m1(ordinal, prop.major, &verdict));
    if (prop.major >= 10 && !verdict.use_hw) {
      KVQ_LOG_WARN("cuda: {}: {}", info.description, verdict.detail);
    }
    info.use_hw_e2m1 = verdict.use_hw;
    info.e2m1_detail = verdict.detail;
    *out = std::move(info);
  });
}

Status probe(ProbeResult* out) noexcept {
  return catch_as_status([&] {
    *out = ProbeResult{};
    int count = 0;
    if (Status s = cuda_device_count(&count); !s) {
      out->reason = s.message();
      return;
    }
    std::string refusals;
    for (int i = 0; i < count; ++i) {
      DeviceInfo info;
      const Status s = open_device(i, &info);
      if (s) {
        out->available = true;
        out->score = kProbeScore;
        out->reason = info.description + ", " + info.e2m1_detail;
        return;
      }
      refusals += (refusals.empty() ? "" : "; ") + s.message();
    }
    out->reason = refusals;
  });
}

}  // namespace kvq::cuda
