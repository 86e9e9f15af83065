// Our E4M3, E5M2 and E2M1 encoders against CUDA's host converters (cuda_fp8.h / cuda_fp4.h
// compiled by the host compiler) on every one of the 2^32 float bit patterns, split over all
// cores; the fp8 cache formats' quantizer (x / s, then the encoder) against vLLM's rule on every
// bf16 and f16 input under a spread of scales; every fp8 code decoded against CUDA's.
// Skips with a message when the CUDA Toolkit headers are absent (KVQ_CUDA_FP4_INCLUDE_DIR).
//
// A sanitized or unoptimized build (KVQ_SANITIZE, CMAKE_BUILD_TYPE=Debug) runs 20 to 50 times
// slower and would not finish in the test's timeout; there tests/layouts/CMakeLists.txt defines
// KVQ_CODEC_SWEEP_STRIDE and the sweep is sampled, and says so: every STRIDE-th pattern (an odd
// stride, so every low bit varies), plus every pattern whose low 16 bits are a rounding edge
// (0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff: exact, sticky, just below, at and just above a
// tie) under each of the 2^16 sign/exponent/high-mantissa prefixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvq/core/bf16.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/float_bits.h"
#include "kvq/layouts/nvfp4_codec.h"

#if defined(KVQ_HAVE_CUDA_FP_HEADERS)
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace kvq {
namespace {

#if defined(KVQ_HAVE_CUDA_FP_HEADERS)

// Runs check(bits) for every 32-bit pattern on all cores; returns the number of mismatches and
// up to 8 examples "bits: ours vs cuda".
#if defined(KVQ_CODEC_SWEEP_STRIDE)
constexpr uint64_t kStride = KVQ_CODEC_SWEEP_STRIDE;
static_assert(kStride % 2 == 1, "an odd stride, so that every low bit varies");
#else
constexpr uint64_t kStride = 1;
#endif
constexpr uint32_t kRoundingEdges[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};

// Says, once per test, when the sweep is the sampled variant.
void note_sampling() {
  if constexpr (kStride > 1) {
    const std::string note =
        "sampled variant (sanitized or Debug build): 1 in " + std::to_string(kStride) +
        " float bit patterns plus every rounding-edge pattern, not all 2^32; a Release build "
        "checks all of them";
    std::printf("[   NOTE   ] %s\n", note.c_str());
    ::testing::Test::RecordProperty("sampled", note);
  }
}

template <class Check>
uint64_t sweep_all_floats(Check check, std::vector<std::string>& examples) {
  note_sampling();
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  constexpr uint64_t kAll = uint64_t{1} << 32;
  constexpr uint64_t kSamples = (kAll + kStride - 1) / kStride;
  std::atomic<uint64_t> mismatches{0};
  std::mutex mu;
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < n; ++w) {
    pool.emplace_back([&, w] {
      uint64_t bad = 0;
      const auto one = [&](uint32_t bits) {
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
      };
      const uint64_t lo = kSamples * w / n, hi = kSamples * (w + 1) / n;
      for (uint64_t i = lo; i < hi; ++i) one(static_cast<uint32_t>(i * kStride));
      if constexpr (kStride > 1) {
        const uint64_t top_lo = (uint64_t{1} << 16) * w / n,
                       top_hi = (uint64_t{1} << 16) * (w + 1) / n;
        for (uint64_t top = top_lo; top < top_hi; ++top) {
          for (const uint32_t low : kRoundingEdges) one(static_cast<uint32_t>(top << 16) | low);
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

TEST(CodecExhaustive, E5m2EqualsCudaSatfiniteOnAll2To32Floats) {
  std::vector<std::string> examples;
  const uint64_t bad = sweep_all_floats(
      [](uint32_t bits, unsigned& ours, unsigned& cuda) {
        const float f = detail::bits_to_float(bits);
        ours = e5m2_from_float(f);
        cuda = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
        return ours == cuda;
      },
      examples);
  EXPECT_EQ(bad, 0u) << "first mismatches:" << join(examples);
}

// Every code of both formats decodes to CUDA's value (through half, which holds every fp8 value
// exactly); NaN codes to a NaN.
TEST(CodecExhaustive, Fp8DecodeEqualsCudaOnEveryCode) {
  for (unsigned c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    for (const auto& [ours, fmt] :
         {std::pair{e4m3_to_float(code), __NV_E4M3}, std::pair{e5m2_to_float(code), __NV_E5M2}}) {
      const __half_raw raw = __nv_cvt_fp8_to_halfraw(code, fmt);
      const float cuda = __half2float(__half(raw));
      if (std::isnan(cuda)) {
        EXPECT_TRUE(std::isnan(ours)) << "code 0x" << std::hex << c;
      } else {
        EXPECT_EQ(detail::float_to_bits(ours), detail::float_to_bits(cuda))
            << "code 0x" << std::hex << c << (fmt == __NV_E4M3 ? " e4m3" : " e5m2");
      }
    }
  }
}

// The fp8 cache formats' encoding (ElementCodec: x / s as an IEEE f32 division, then saturating
// RNE) equals vLLM's __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, ...) for every bf16 and
// every f16 input under scales from tiny to huge, including the amax / 448 of typical rows.
TEST(CodecExhaustive, Fp8QuantizeEqualsVllmRuleOnEveryBf16AndF16Input) {
  const float scales[] = {1.0f,    0.5f,    3.0f,     1.0f / 448.0f, 2.5f / 448.0f,
                          0.0123f, 7.3e-5f, 1.0e-30f, 3.4e30f};
  uint64_t bad = 0;
  std::string first;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float inputs[2] = {bf16_to_float(static_cast<uint16_t>(h)),
                             __half2float(__half(__half_raw{static_cast<unsigned short>(h)}))};
    for (const float x : inputs) {
      for (const float s : scales) {
        const unsigned e4 = ElementCodec<KVQ_FORMAT_FP8_E4M3>::encode(x, s);
        const unsigned e5 = ElementCodec<KVQ_FORMAT_FP8_E5M2>::encode(x, s);
        const unsigned c4 = __nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E4M3);
        const unsigned c5 = __nv_cvt_float_to_fp8(x / s, __NV_SATFINITE, __NV_E5M2);
        if (e4 != c4 || e5 != c5) {
          if (bad++ == 0) {
            first = "input 0x" + std::to_string(h) + " scale " + std::to_string(s);
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "first: " << first;
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
