#pragma once
// Before any write uses sm_100's hardware E2M1 (cvt.rn.satfinite.e2m1x2.f32), the probe and the
// writer run it next to the software path on the values where an encoder can go wrong (every
// rounding boundary and its neighbours, zeros, subnormals, saturation, infinities, NaNs of both
// signs and both kinds) and refuse it, with the first difference as the reason, if any result
// differs from kvq::e2m1_from_float. No header of CUDA's: plain C++ can call it.
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/status.h"

namespace kvq::cuda {

struct HwE2m1Verdict {
  bool use_hw = false;  // the hardware path exists on this device and matched everywhere
  std::string detail;   // "hardware E2M1 ..." / "software E2M1: ..." for the probe's reason
};

// The boundary values (a multiple of 8 of them).
std::vector<float> e2m1_boundary_values();

// Runs both encoders on `values` (a multiple of 8) on device `ordinal`: nibble words as the
// write kernel packs them, and whether this build has the hardware instruction for the device.
Status run_e2m1_hw_sw(int ordinal, const std::vector<float>& values, std::vector<uint32_t>* hw,
                      std::vector<uint32_t>* sw, bool* has_hw) noexcept;

// On device `ordinal` (made current for the call; synchronizes). Devices below sm_100 get
// use_hw = false without a launch. A CUDA failure is an error Status.
Status check_hw_e2m1(int ordinal, int cc_major, HwE2m1Verdict* out) noexcept;

}  // namespace kvq::cuda
