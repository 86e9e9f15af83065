#pragma once
// What a GPU test (cuda, the demo's) does when it finds no usable CUDA device: skip (the
// default, so the GPU binaries run clean on CI machines without one), or fail when KVQ_REQUIRE_GPU
// is set.
//
// KVQ_REQUIRE_GPU (read here, by gpu_required()): set to anything but "" or "0" (the GPU scripts,
// tests/cuda/run_gpu_suite.sh and scripts/gpu_session.sh, export KVQ_REQUIRE_GPU=1), a test
// that would skip for want of a device fails instead, with the probe's reason. Without it, a GPU
// machine whose driver and runtime disagree (or with CUDA_VISIBLE_DEVICES emptied) would skip
// every GPU test and still report success. Only the "no device at all" skip turns into a failure:
// skips for what this device lacks (sm_100 for the hardware E2M1, a second GPU) stay skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace kvq::test {

inline bool gpu_required() {
  const char* v = std::getenv("KVQ_REQUIRE_GPU");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace kvq::test

// In a test body (returns from it): skips with `reason` ("no CUDA device: ..."), or fails with it
// when KVQ_REQUIRE_GPU is set.
#define KVQ_NO_CUDA_DEVICE(reason)                                                           \
  do {                                                                                       \
    if (::kvq::test::gpu_required()) {                                                       \
      FAIL() << (reason) << " (KVQ_REQUIRE_GPU is set: a GPU test may not skip for want of " \
             << "a device; check the driver against the CUDA runtime, nvidia-smi, "          \
             << "CUDA_VISIBLE_DEVICES)";                                                     \
    }                                                                                        \
    GTEST_SKIP() << (reason);                                                                \
  } while (0)
