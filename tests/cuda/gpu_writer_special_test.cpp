// Special inputs (zeros, -0.0, subnormals, tiny and huge groups, infinities, NaNs of every kind)
// in every input dtype, the format doc's worked vectors as exact bytes, and scales passed by
// device pointer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_support.h"
#include "kvq/core/scale_rule.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq::cuda::test {
namespace {

// Raw element patterns of one 16-element group.
using Group = std::vector<uint32_t>;

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The raw pattern of `f` in `dtype` (f must be representable; specials are given raw below).
uint32_t raw(DType dtype, float f) {
  switch (dtype) {
    case DType::bf16: return float_to_bf16_exact(f);
    case DType::f16: return float_to_f16_exact(f);
    default: return f32_bits(f);
  }
}

struct Specials {
  uint32_t pos_zero, neg_zero, sub_min, sub_max, neg_sub, inf, neg_inf, qnan, neg_qnan, snan, huge;
};

Specials specials(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {0x0000, 0x8000, 0x0001, 0x007F, 0x8001, 0x7F80,
              0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7F7F};
    case DType::f16:
      return {0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x7C00,
              0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7BFF};
    default:
      return {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x80000001u, 0x7F800000u,
              0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F7FFFFFu};
  }
}

std::vector<Group> special_groups(DType dtype) {
  const Specials s = specials(dtype);
  auto r = [&](float f) { return raw(dtype, f); };
  std::vector<Group> g;
  g.push_back(Group(16, s.pos_zero));
  g.push_back(Group(16, s.neg_zero));
  g.push_back({r(0), r(.25f), r(.5f), r(.75f), r(1), r(1.25f), r(1.5f), r(1.75f), r(2), r(2.5f),
               r(3), r(3.5f), r(4), r(5), r(6), r(-6)});
  g.push_back({r(7), r(-7), r(1), r(.5f), r(.25f), r(2), r(3), r(4), r(5), r(6), r(1.5f), r(-1),
               r(0), r(-.25f), r(.75f), r(1.25f)});
  Group subs(16, s.sub_min);
  subs[1] = s.sub_max;
  subs[2] = s.neg_sub;
  subs[3] = s.neg_zero;
  g.push_back(subs);
  Group tiny(16, r(1.0f / 65536));
  tiny[5] = r(-1.0f / 32768);
  g.push_back(tiny);
  Group huge(16, r(1.0f));
  huge[0] = s.huge;
  huge[7] = s.huge | (dtype == DType::f32 ? 0x80000000u : 0x8000u);
  g.push_back(huge);
  Group inf(16, r(0.5f));
  inf[3] = s.inf;
  inf[9] = s.neg_inf;
  inf[10] = r(-2.0f);
  g.push_back(inf);
  g.push_back(Group(16, s.neg_inf));
  Group nan(16, r(-1.5f));
  nan[0] = s.qnan;
  nan[1] = s.neg_qnan;
  nan[2] = s.snan;
  nan[15] = r(3.0f);
  g.push_back(nan);
  g.push_back(Group(16, s.qnan));
  Group nan_inf(16, s.neg_qnan);
  nan_inf[4] = s.inf;
  g.push_back(nan_inf);
  Group mixed(16, s.neg_zero);
  mixed[8] = s.snan;
  mixed[9] = r(0.001f);
  g.push_back(mixed);
  return g;
}

// One token per special group per side; the rest of the row random-ish values.
WriteCase special_case(DType dtype, const char* order, const char* k_arr, const char* v_arr,
                       float k_scale, float v_scale) {
  WriteCase c;
  c.spec.num_kv_heads = 2;
  c.spec.head_size = 64;
  c.spec.block_size = 16;
  c.spec.layout.order = order;
  c.spec.layout.k_scales = k_arr;
  c.spec.layout.v_scales = v_arr;
  c.dtype = dtype;
  const std::vector<Group> groups = special_groups(dtype);
  c.tokens = static_cast<int64_t>(groups.size());
  c.spec.num_blocks = 4;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  shape_case(c);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int side = 0; side < 2; ++side) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t gi = 0; gi < 4; ++gi) {
          // Put the token's special group at (h, gi) = (t % 2, t % 4), and its neighbours'
          // groups elsewhere, so every position of the row sees specials.
          const Group& grp = groups[static_cast<size_t>((t + h * 4 + gi) % c.tokens)];
          for (int64_t e = 0; e < 16; ++e) c.set_bits(side, t, h, gi * 16 + e, grp[e]);
        }
      }
    }
    c.slots.push_back(t * 3 + 1);  // spread over the pages
  }
  return c;
}

TEST(GpuWriterSpecial, SpecialValuesMatchReferenceInEveryDtypeAndLayout) {
  KVQ_REQUIRE_CUDA_DEVICE();
  int cases = 0;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (const char* order : {"HND", "NHD"}) {
      for (auto [k_arr, v_arr] :
           {std::pair{"linear", "sm100_swizzled"}, std::pair{"sm100_swizzled", "linear"}}) {
        for (auto [ks, vs] :
             {std::pair{1.0f, 1.0f}, std::pair{0.0123f, 7.5f}, std::pair{2.0f / 448, 1e-30f},
              std::pair{3e-38f, 1e36f}}) {  // the last: step 4 outside the fast window
          for (bool device_scales : {false, true}) {
            WriteCase c = special_case(dtype, order, k_arr, v_arr, ks, vs);
            c.device_scales = device_scales;
            SCOPED_TRACE(c.describe());
            ASSERT_EQ(write_differs_from_reference(c, 7 + cases), "");
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 4 * 2);
}

// docs/format.md's worked vectors, as exact bytes (f32 input, K side, head 0,
// group 0 of token-in-page 0), written by the GPU.
TEST(GpuWriterSpecial, WorkedVectorsGiveTheDocumentedBytes) {
  KVQ_REQUIRE_CUDA_DEVICE();
  struct Vector {
    std::vector<float> x;
    float k_scale;
    uint8_t scale;
    uint8_t data[8];
  };
  std::vector<float> v3(16, 0.0f), v5(16, 0.0f), v6(16, 1.0f);
  v3[0] = 3000.0f;
  v5[0] = 0.005f;
  v5[1] = -0.004f;
  v6[15] = -0.5f;
  const std::vector<Vector> vectors = {
      {{0, .25f, .5f, .75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.5f, 3, 3.5f, 4, 5, 6, -6},
       1.0f,
       0x38,
       {0x00, 0x21, 0x22, 0x43, 0x44, 0x65, 0x66, 0xf7}},
      {{7, -7, 1, .5f, .25f, 2, 3, 4, 5, 6, 1.5f, -1, 0, -.25f, .75f, 1.25f},
       1.0f,
       0x39,
       {0xf7, 0x12, 0x40, 0x65, 0x76, 0xa3, 0x80, 0x21}},
      {std::vector<float>(16, 0.0f), 1.0f, 0x00, {0, 0, 0, 0, 0, 0, 0, 0}},
      {v3, 1.0f, 0x7e, {0x07, 0, 0, 0, 0, 0, 0, 0}},
      {v5, 1.0f, 0x00, {0x80, 0, 0, 0, 0, 0, 0, 0}},
      {v6, 2.0f / 448, 0x61, {0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0xd7}},
  };
  for (size_t i = 0; i < vectors.size(); ++i) {
    const Vector& v = vectors[i];
    SCOPED_TRACE("worked vector " + std::to_string(i + 1));
    WriteCase c;
    c.spec.num_kv_heads = 1;
    c.spec.head_size = 64;
    c.spec.block_size = 16;
    c.spec.num_blocks = 1;
    c.dtype = DType::f32;
    c.tokens = 1;
    c.k_scale = v.k_scale;
    shape_case(c);
    for (int e = 0; e < 16; ++e) c.set_element(0, 0, 0, e, v.x[static_cast<size_t>(e)]);
    c.slots = {0};
    const PageLayout layout = PageLayout::from_spec(c.spec);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase d = upload_case(c, std::vector<uint8_t>(layout.cache_bytes(), 0xAA));
    ASSERT_TRUE(writer->write(d.args).is_ok());
    const auto got = d.download_cache();
    EXPECT_EQ(d.guards_changed(), "");
    EXPECT_EQ(got[layout.scale_offset(Side::k, 0, 0, 0)], v.scale);
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(got[layout.data_offset(Side::k, 0, 0, 0) + k], v.data[k]) << "data byte " << k;
    }
  }
}

// Device-pointer scales give the bytes of the same values passed on the host, and the kernel
// reads them when it runs (a new value in the same buffer changes the next write).
TEST(GpuWriterSpecial, DeviceScalePointersEqualHostScales) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(99);
  for (int i = 0; i < 12; ++i) {
    WriteCase c = random_case(rng, i * 8);
    c.device_scales = false;
    SCOPED_TRACE(c.describe());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 55 + i);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase host_scaled = upload_case(c, initial);
    ASSERT_TRUE(writer->write(host_scaled.args).is_ok());
    c.device_scales = true;
    DeviceCase dev_scaled = upload_case(c, initial);
    ASSERT_TRUE(writer->write(dev_scaled.args).is_ok());
    EXPECT_EQ(host_scaled.guards_changed(), "") << "host scales";
    ASSERT_EQ(compare_cache(dev_scaled, host_scaled.download_cache(), layout.descriptor()), "");
    // New scales in the same device buffer: the next write uses them.
    c.k_scale *= 3.0f;
    c.v_scale *= 0.25f;
    const float s[2] = {c.k_scale, c.v_scale};
    dev_scaled.scales.upload(s, sizeof s);
    dev_scaled.upload_cache(initial);
    ASSERT_TRUE(writer->write(dev_scaled.args).is_ok());
    std::vector<uint8_t> want = initial;
    reference_write(c, want);
    ASSERT_EQ(compare_cache(dev_scaled, want, layout.descriptor()), "");
  }
}

// A device scale that breaks kScaleRule (the host refuses such a host scale up front) makes
// the write write nothing at all, neither side, in every thread mapping; the next take reports
// its tokens (padding not counted) with the value, and a good scale in the same buffer writes
// again.
TEST(GpuWriterSpecial, AnUnusableDeviceScaleWritesNothingAndIsReported) {
  KVQ_REQUIRE_CUDA_DEVICE();
  // One side a thread (small), one wave (streaming), several waves (read-only loads), two groups.
  const CaseShape one_wave{8, 128, 16, 2048}, waves{8, 128, 16, 4096}, pairs{8, 128, 16, 12003};
  const CaseShape* shapes[] = {nullptr, &one_wave, &waves, &pairs};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::pair<float, std::string> bad[] = {
      {0.0f, "0"}, {nan, "nan"}, {-nan, "nan"}, {1e-40f, "1e-40"}, {-1.0f, "-1"}};
  std::mt19937_64 rng(123);
  for (const CaseShape* shape : shapes) {
    WriteCase c = random_case(rng, 2, shape);
    c.device_scales = true;
    const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
    // One token past the cache: counted as out of range in every mapping, refused write or not.
    ASSERT_GE(c.tokens, 2);
    c.slots[1] = num_slots + 5;
    const auto live = std::count_if(c.slots.begin(), c.slots.end(),
                                    [&](int64_t s) { return s >= 0 && s < num_slots; });
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 77);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase d = upload_case(c, initial);
    // Both scales on the device, a bad one on either side; then K's on the host, V's bad.
    for (int round = 0; round < 3; ++round) {
      const int side = round == 0 ? 0 : 1;
      if (round == 2) {
        d.args.k_scale_ptr = nullptr;
        d.args.k_scale = c.k_scale;
      }
      for (const auto& [value, text] : bad) {
        SCOPED_TRACE(c.describe() + (side == 0 ? ", k_scale " : ", v_scale ") + text +
                     (round == 2 ? ", k_scale on the host" : ""));
        float s[2] = {c.k_scale, c.v_scale};
        s[side] = value;
        d.scales.upload(s, sizeof s);
        ASSERT_TRUE(writer->write(d.args).is_ok());
        int64_t count = -1;
        const Status st = writer->take_out_of_range_slots(&count);
        EXPECT_EQ(st.code(), ErrorCode::invalid_argument);
        EXPECT_EQ(st.message(),
                  std::to_string(live) +
                      " token(s) since the last take were not written: their write's device "
                      "scale broke the rule (the last: *" +
                      std::string(side == 0 ? "k" : "v") + "_scale_ptr = " + text + ": " +
                      kScaleRule + ")");
        EXPECT_EQ(count, 1);
        ASSERT_EQ(compare_cache(d, initial, layout.descriptor()), "");
      }
    }
    const float good[2] = {c.k_scale, c.v_scale};
    d.scales.upload(good, sizeof good);
    ASSERT_TRUE(writer->write(d.args).is_ok());
    int64_t count = -1;
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, 1);
    std::vector<uint8_t> want = initial;
    reference_write(c, want);  // skips the slot past the cache
    ASSERT_EQ(compare_cache(d, want, layout.descriptor()), "");
  }
}

}  // namespace
}  // namespace kvq::cuda::test
