#pragma once
// The plugin's probe and the device checks the writer and reader share.
#include <cstdint>
#include <string>

#include "kvq/core/status.h"

namespace kvq::cuda {

inline constexpr int kProbeScore = 100;

struct ProbeResult {
  bool available = false;
  int32_t score = 0;
  std::string reason;  // why not available, or the device and E2M1 path it will use
};                     // above reference_cpu's 10: `backend: auto` prefers GPUs

// What a writer/reader needs to know about its device, after checking that it can run there:
// it exists, compute capability >= 9.0, the kernels have an image for it, and whether the
// hardware E2M1 path passed its check.
struct DeviceInfo {
  int ordinal = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
  bool use_hw_e2m1 = false;
  std::string description;  // "NVIDIA H200 (cuda:0, compute capability 9.0, 132 SMs)"
  std::string e2m1_detail;  // "software E2M1 (no hardware FP4 conversion before sm_100)"
};

// cudaGetDeviceCount with a failure or zero devices turned into the reason a user can act on
// (ErrorCode::unavailable): "no CUDA device: ...", "driver too old: ...".
Status cuda_device_count(int* count) noexcept;

// Errors: unavailable ("no CUDA device: ...", "driver too old: ...", "cuda:2 does not exist ...",
// "compute capability 8.0 < 9.0 ...", no kernel image), runtime (other CUDA failures).
Status open_device(int ordinal, DeviceInfo* out) noexcept;

// Available iff some CUDA device has compute capability >= 9.0; the reason names it, its compute
// capability and the E2M1 path; otherwise the reason it is not.
Status probe(ProbeResult* out) noexcept;

}  // namespace kvq::cuda
