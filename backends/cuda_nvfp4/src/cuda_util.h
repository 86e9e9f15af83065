#pragma once
// Small host helpers around the CUDA runtime: errors as kvq::Status, a scoped current device.
#include <cuda_runtime.h>

#include <string>

#include "kvq/core/status.h"

namespace kvq::cuda_nvfp4 {

// "cudaMalloc (out-of-range counter) on cuda:0 failed: out of memory (cudaErrorMemoryAllocation)".
// Clears the runtime's last error (sticky errors stay, as they must).
Status cuda_status(cudaError_t err, const std::string& what, int ordinal);

// Makes `ordinal` current for a scope and puts the caller's device back afterwards (no-op when
// it already is current: the usual case, which costs one cudaGetDevice).
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  int ordinal_;
  cudaError_t error_ = cudaSuccess;
};

// "NVIDIA H200 (cuda:0, compute capability 9.0, 132 SMs)"
std::string describe_device(const cudaDeviceProp& prop, int ordinal);

}  // namespace kvq::cuda_nvfp4
