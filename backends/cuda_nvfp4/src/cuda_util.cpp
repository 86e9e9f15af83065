#include "cuda_util.h"

#include <fmt/format.h>

namespace kvq::cuda_nvfp4 {

Status cuda_status(cudaError_t err, const std::string& what, int ordinal) {
  (void)cudaGetLastError();
  const ErrorCode code = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                             ? ErrorCode::unavailable
                             : ErrorCode::runtime;
  return {code, fmt::format("{} on cuda:{} failed: {} ({})", what, ordinal, cudaGetErrorString(err),
                            cudaGetErrorName(err))};
}

DeviceGuard::DeviceGuard(int ordinal) : ordinal_(ordinal) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != ordinal) error_ = cudaSetDevice(ordinal);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != ordinal_) (void)cudaSetDevice(previous_);
}

std::string describe_device(const cudaDeviceProp& prop, int ordinal) {
  return fmt::format("{} (cuda:{}, compute capability {}.{}, {} SMs)", prop.name, ordinal,
                     prop.major, prop.minor, prop.multiProcessorCount);
}

}  // namespace kvq::cuda_nvfp4
