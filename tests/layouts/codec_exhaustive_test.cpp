// Our E4M3 and E2M1 encoders against CUDA's host converters (cuda_fp8.h / cuda_fp4.h compiled
// by the host compiler) on every one of the 2^32 float bit patterns, split over all cores.
// Skips with a message when the CUDA Toolkit headers are absent (KVQ_CUDA_FP4_INCLUDE_DIR).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/nvfp4_codec.h"

#if defined(KVQ_HAVE_CUDA_FP_HEADERS)
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace kvq {
namespace {

#if defined(KVQ_HAVE_CUDA_FP_HEADERS)

// Runs check(bits) for every 32-bit pattern on all cores; returns the number of mismatches and
// up to 8 examples "bits: ours vs cuda".
template <class Check>
uint64_t sweep_all_floats(Check check, std::vector<std::string>& examples) {
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  constexpr uint64_t kAll = uint64_t{1} << 32;
  std::atomic<uint64_t> mismatches{0};
  std::mutex mu;
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < n; ++w) {
    pool.emplace_back([&, w] {
      const uint64_t lo = kAll * w / n, hi = kAll * (w + 1) / n;
      uint64_t bad = 0;
      for (uint64_t b = lo; b < hi; ++b) {
        const auto bits = static_cast<uint32_t>(b);
        unsigned ours = 0, cuda = 0;
        if (!check(bits, ours, cuda)) [[unlikely]] {
          if (++bad <= 8) {
            char line[96];
            std::snprintf(line, sizeof line, "0x%08x (%a): ours 0x%02x, cuda 0x%02x", bits,
                          static_cast<double>(detail::bits_to_float(bits)), ours, cuda);
            std::lock_guard lock(mu);
            if (examples.size() < 8) examples.emplace_back(line);
          }
        }
      }
      mismatches += bad;
    });
  }
  for (auto& t : pool) t.join();
  return mismatches;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "\n  " + l;
  return out;
}

TEST(CodecExhaustive, E4m3EqualsCudaSatfiniteOnAll2To32Floats) {
  std::vector<std::string> examples;
  const uint64_t bad = sweep_all_floats(
      [](uint32_t bits, unsigned& ours, unsigned& cuda) {
        const float f = detail::bits_to_float(bits);
        ours = e4m3_from_float(f);
        cuda = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
        return ours == cuda;
      },
      examples);
  EXPECT_EQ(bad, 0u) << "first mismatches:" << join(examples);
}

TEST(CodecExhaustive, E2m1EqualsCudaRoundNearestOnAll2To32Floats) {
  std::vector<std::string> examples;
  const uint64_t bad = sweep_all_floats(
      [](uint32_t bits, unsigned& ours, unsigned& cuda) {
        const float f = detail::bits_to_float(bits);
        ours = e2m1_from_float(f);
        cuda = __nv_cvt_float_to_fp4(f, __NV_E2M1, cudaRoundNearest);
        return ours == cuda;
      },
      examples);
  EXPECT_EQ(bad, 0u) << "first mismatches:" << join(examples);
}

#else

TEST(CodecExhaustive, NeedsCudaToolkitHeaders) {
  GTEST_SKIP() << "cuda_fp4.h / cuda_fp8.h not found (KVQ_CUDA_FP4_INCLUDE_DIR unset at "
                  "configure time): the 2^32-input comparison with CUDA's host converters "
                  "did not run. Install the CUDA Toolkit headers and reconfigure.";
}

#endif

}  // namespace
}  // namespace kvq
