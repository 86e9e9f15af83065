// The device codecs the write kernel uses, against the reference codecs: E2M1 software (and, on
// sm_100, hardware) and E4M3 hardware encode over all 2^32 floats on the GPU, E4M3 decode over
// all 256 codes, the device quantizer against nvfp4_quantize_group; the per-element kernels' fp8
// pair encoders (E4M3 and E5M2, both lanes) over all 2^32 floats and their decoders over every
// code and a spread of scales, against kvq's codecs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_codec_kernels.h"
#include "gpu_test_support.h"
#include "hw_e2m1_check.h"
#include "kernel_desc.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "probe.h"

namespace kvq::cuda::test {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(GpuCodecs, E2m1SoftwareExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  ExhaustiveResult r;
  check_cuda(exhaustive_e2m1(false, &r), "exhaustive E2M1 (software)");
  EXPECT_EQ(r.checked, uint64_t{1} << 32);
  EXPECT_EQ(r.mismatches, 0u) << "first mismatching float bits: 0x" << std::hex << r.first_bad;
}

TEST(GpuCodecs, E2m1ProductExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  ExhaustiveResult r;
  check_cuda(exhaustive_e2m1_products(&r), "exhaustive E2M1 of products");
  EXPECT_EQ(r.checked, uint64_t{1} << 32);
  EXPECT_EQ(r.mismatches, 0u) << "first mismatching float bits: 0x" << std::hex << r.first_bad;
}

TEST(GpuCodecs, E2m1HardwareExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  DeviceInfo info;
  ASSERT_TRUE(open_device(0, &info).is_ok());
  if (info.cc_major < 10) {
    GTEST_SKIP() << "no hardware E2M1 on " << info.description << " (sm_100 and newer)";
  }
  ExhaustiveResult r;
  check_cuda(exhaustive_e2m1(true, &r), "exhaustive E2M1 (hardware)");
  ASSERT_EQ(r.has_hw, 1u) << "the sm_100 image was built without the hardware path";
  EXPECT_EQ(r.checked, uint64_t{1} << 32);
  // Recorded either way; the writer uses the hardware path only when the probe's boundary check
  // passed, so a mismatch here must have made the probe refuse it.
  if (r.mismatches != 0) {
    EXPECT_FALSE(info.use_hw_e2m1) << r.mismatches << " mismatches, first 0x" << std::hex
                                   << r.first_bad << ", yet the probe accepted the hardware path";
  }
  RecordProperty("hw_e2m1_mismatches", std::to_string(r.mismatches));
}

TEST(GpuCodecs, E4m3HardwareEncodeExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  ExhaustiveResult r;
  check_cuda(exhaustive_e4m3(&r), "exhaustive E4M3");
  EXPECT_EQ(r.checked, uint64_t{1} << 32);
  EXPECT_EQ(r.mismatches, 0u) << "first mismatching float bits: 0x" << std::hex << r.first_bad;
}

// The per-element writer's fp8 encoders (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32) are
// kvq::e4m3_from_float / e5m2_from_float, in either lane of the pair, on every float: NaN -> 0x7F
// whatever its sign, saturation to the largest finite value (infinities too), -0 kept.
TEST(GpuCodecs, Fp8PairEncodersExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (int format : {KVQ_FORMAT_FP8_E4M3, KVQ_FORMAT_FP8_E5M2}) {
    ExhaustiveResult r;
    check_cuda(exhaustive_fp8_pairs(format, &r), "exhaustive fp8 pairs");
    EXPECT_EQ(r.checked, uint64_t{2} << 32) << kvq_format_name(format);
    EXPECT_EQ(r.mismatches, 0u) << kvq_format_name(format) << ": first mismatching float bits: 0x"
                                << std::hex << r.first_bad;
  }
}

// The per-element reader's decode equals ElementCodec::decode bit for bit, NaN codes included
// (the decoder's NaN with its sign, as the host's multiply leaves it).
TEST(GpuCodecs, ElementDecodeEveryCodeAndScale) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const std::vector<float> scales = {1.0f, 0.5f, 3.7e-3f, 1e-30f, 7.1f, 1e30f, 2.9e-39f};
  for (int format : {KVQ_FORMAT_FP8_E4M3, KVQ_FORMAT_FP8_E5M2, KVQ_FORMAT_BF16}) {
    const uint32_t codes = format == KVQ_FORMAT_BF16 ? 65536u : 256u;
    std::vector<uint32_t> got(codes * scales.size());
    check_cuda(
        element_decode_all(format, scales.data(), static_cast<int>(scales.size()), got.data()),
        "element decode");
    int bad = 0;
    for (size_t s = 0; s < scales.size(); ++s) {
      for (uint32_t c = 0; c < codes && bad < 5; ++c) {
        float want = 0;
        switch (format) {
          case KVQ_FORMAT_FP8_E4M3:
            want = ElementCodec<KVQ_FORMAT_FP8_E4M3>::decode(static_cast<uint8_t>(c), scales[s]);
            break;
          case KVQ_FORMAT_FP8_E5M2:
            want = ElementCodec<KVQ_FORMAT_FP8_E5M2>::decode(static_cast<uint8_t>(c), scales[s]);
            break;
          default: want = ElementCodec<KVQ_FORMAT_BF16>::decode(static_cast<uint16_t>(c), 1.0f);
        }
        if (got[s * codes + c] != bits_of(want)) {
          ++bad;
          ADD_FAILURE() << kvq_format_name(format) << " code 0x" << std::hex << c << " scale "
                        << scales[s] << ": got 0x" << got[s * codes + c] << ", expected 0x"
                        << bits_of(want);
        }
      }
    }
  }
}

TEST(GpuCodecs, ReciprocalInWindowExhaustive) {
  KVQ_REQUIRE_CUDA_DEVICE();
  ExhaustiveResult r;
  check_cuda(exhaustive_reciprocal_in_window(&r), "exhaustive in-window reciprocal");
  EXPECT_EQ(r.checked, uint64_t{252} << 23);  // exponent fields 1..252, every mantissa
  EXPECT_EQ(r.mismatches, 0u) << "first mismatching float bits: 0x" << std::hex << r.first_bad;
}

TEST(GpuCodecs, E4m3DecodeAllCodes) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::vector<uint32_t> got(256);
  check_cuda(e4m3_decode_all(got.data()), "E4M3 decode");
  for (uint32_t c = 0; c < 256; ++c) {
    const float want = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(from_bits(got[c]))) << "code 0x" << std::hex << c;
    } else {
      EXPECT_EQ(got[c], bits_of(want)) << "code 0x" << std::hex << c;
    }
  }
}

// The device's copy of the reference is the host's: random patterns and the boundary values,
// device software codes against the host reference.
TEST(GpuCodecs, E2m1SoftwareMatchesHostReferenceOnSamples) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::vector<uint32_t> bits;
  for (float f : e2m1_boundary_values()) bits.push_back(bits_of(f));
  std::mt19937 rng(3);
  while (bits.size() < (1u << 20)) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<uint32_t> got(bits.size());
  check_cuda(e2m1_sw_codes(bits.data(), got.data(), static_cast<int>(bits.size())), "E2M1 codes");
  int bad = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t want = e2m1_from_float(from_bits(bits[i]));
    if (got[i] != want && bad++ < 5) {
      ADD_FAILURE() << "bits 0x" << std::hex << bits[i] << ": device 0x" << got[i] << ", host 0x"
                    << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(GpuCodecs, DeviceQuantizerMatchesNvfp4QuantizeGroup) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const int groups = 1 << 16;
  std::vector<float> x(static_cast<size_t>(groups) * 16);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            from_bits(0xFFC00000u),
                            from_bits(0x7F800001u),
                            1e-40f,
                            -1e-45f,
                            3e38f};
  for (int g = 0; g < groups; ++g) {
    const float mag = std::pow(10.0f, u(rng));
    for (int i = 0; i < 16; ++i) {
      float v = n(rng) * mag;
      if (g % 7 == 0 && (i * 5 + g) % 11 == 0) v = specials[(i + g) % 10];
      x[static_cast<size_t>(g) * 16 + i] = v;
    }
  }
  // 3e-38 and 1e36 put step 4's divisors outside the in-window reciprocal's window (below
  // 2^-126, above 2^126): those take __frcp_rn alone; the others both ways.
  for (float k_scale : {1.0f, 0.0123f, 448.0f, 3e-38f, 1e36f}) {
    for (bool fast_rcp : {false, true}) {
      const float global = nvfp4_global_scale(k_scale);
      const float inv = 1.0f / global;
      if (fast_rcp && !reciprocal_window_holds(inv)) continue;
      SCOPED_TRACE(fast_rcp ? "in-window reciprocal" : "__frcp_rn");
      std::vector<uint32_t> out(static_cast<size_t>(groups) * 3);
      check_cuda(quantize_groups(x.data(), groups, global, inv, fast_rcp, out.data()),
                 "quantize groups");
      int bad = 0;
      for (int g = 0; g < groups; ++g) {
        const Nvfp4Group want = nvfp4_quantize_group(&x[static_cast<size_t>(g) * 16], global);
        uint32_t w[2];
        std::memcpy(w, want.data, 8);
        const uint32_t* got = &out[static_cast<size_t>(g) * 3];
        if ((got[0] != want.scale || got[1] != w[0] || got[2] != w[1]) && bad++ < 5) {
          ADD_FAILURE() << "k_scale " << k_scale << " group " << g << ": scale 0x" << std::hex
                        << got[0] << " vs 0x" << +want.scale << ", data " << got[1] << ":" << got[2]
                        << " vs " << w[0] << ":" << w[1];
        }
      }
      EXPECT_EQ(bad, 0) << "k_scale " << k_scale;
    }
  }
}

TEST(GpuCodecs, HardwareCheckVerdictMatchesTheDevice) {
  KVQ_REQUIRE_CUDA_DEVICE();
  DeviceInfo info;
  const Status s = open_device(0, &info);
  ASSERT_TRUE(s.is_ok()) << s.message();
  if (info.cc_major < 10) {
    EXPECT_FALSE(info.use_hw_e2m1);
    EXPECT_EQ(info.e2m1_detail, "software E2M1 (no hardware FP4 conversion before sm_100)");
  } else {
    EXPECT_NE(info.e2m1_detail.find("E2M1"), std::string::npos);
  }
  RecordProperty("device", info.description);
  RecordProperty("e2m1", info.e2m1_detail);
}

}  // namespace
}  // namespace kvq::cuda::test
