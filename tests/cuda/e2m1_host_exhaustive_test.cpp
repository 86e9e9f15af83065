// The software E2M1 encoder (e2m1_fast.h), compiled for the host, against kvq::e2m1_from_float
// for all 2^32 floats, one at a time and 8 at a time as the kernel packs them. (The device
// compilation is checked the same way on the GPU: GpuCodecs.E2m1SoftwareExhaustive.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "e2m1_fast.h"
#include "kvq/layouts/nvfp4_codec.h"

namespace kvq::cuda {
namespace {

TEST(E2m1Software, EqualsTheReferenceForAllFloatsOnTheHost) {
  constexpr uint64_t kAll = uint64_t{1} << 32;
  const unsigned threads = std::max(2u, std::thread::hardware_concurrency());
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint32_t> first_bad{0xFFFFFFFFu};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      const uint64_t begin = kAll / threads * w;
      const uint64_t end = w + 1 == threads ? kAll : kAll / threads * (w + 1);
      uint64_t bad = 0;
      float y[8];
      for (uint64_t u = begin & ~uint64_t{7}; u < end; u += 8) {
        for (int k = 0; k < 8; ++k) {
          const auto bits = static_cast<uint32_t>(u + k);
          std::memcpy(&y[k], &bits, 4);
        }
        const uint32_t word = e2m1x8_sw(y);
        for (int k = 0; k < 8; ++k) {
          const uint32_t want = e2m1_from_float(y[k]);
          if (((word >> (4 * k)) & 0xFu) != want || e2m1_sw(y[k]) != want) {
            ++bad;
            uint32_t cur = first_bad.load();
            const auto bits = static_cast<uint32_t>(u + k);
            while (bits < cur && !first_bad.compare_exchange_weak(cur, bits)) {
            }
          }
        }
      }
      mismatches += bad;
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(mismatches.load(), 0u)
      << "first mismatching float bits: 0x" << std::hex << first_bad.load();
}

}  // namespace
}  // namespace kvq::cuda
