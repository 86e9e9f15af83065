// Golden caches: small caches whose every byte is pinned. Each (token, head, group) of K and V is
// filled with one of the format doc's worked vectors (or one derived below by hand from its
// rules), and the expected page bytes are those vectors' bytes placed at offsets computed from
// the doc's formulas (reference_test_util.h HandLayout). Bytes no token writes keep a sentinel,
// and the guard bands around the cache (GuardedCache) their pattern: the slots include the first
// and last slot of a cache and negative ones other than -1.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "reference_test_util.h"

namespace kvq {
namespace {

using test::HandLayout;
using test::Rows;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint8_t kSentinel = 0xA5;  // what the cache holds before the write

struct Vector {
  const char* what;
  std::array<float, 16> x;
  uint8_t scale;
  std::array<uint8_t, 8> data;
};

// docs/format.md, "Worked vectors" (k_scale = 1).
const Vector kV1 = {"doc row 1",
                    {0, .25f, .5f, .75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.5f, 3, 3.5f, 4, 5, 6, -6},
                    0x38,
                    {0x00, 0x21, 0x22, 0x43, 0x44, 0x65, 0x66, 0xf7}};
const Vector kV2 = {"doc row 2",
                    {7, -7, 1, .5f, .25f, 2, 3, 4, 5, 6, 1.5f, -1, 0, -.25f, .75f, 1.25f},
                    0x39,
                    {0xf7, 0x12, 0x40, 0x65, 0x76, 0xa3, 0x80, 0x21}};
const Vector kZeros = {"all zeros", {}, 0x00, {0, 0, 0, 0, 0, 0, 0, 0}};
const Vector kHuge = {"3000 then zeros (scale saturates)",
                      {3000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                      0x7e,
                      {0x07, 0, 0, 0, 0, 0, 0, 0}};
const Vector kTiny = {"tiny group: sf_raw < 2^-10 gives scale 0, -0.004 keeps its sign",
                      {.005f, -.004f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                      0x00,
                      {0x80, 0, 0, 0, 0, 0, 0, 0}};
// k_scale = 2/448 (row 6 of the doc's table).
const Vector kScaled = {"fifteen 1.0 then -0.5, k_scale 2/448",
                        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -.5f},
                        0x61,
                        {0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0xd7}};

// Derived by hand from the doc's rules:
// -0.0 everywhere: amax 0 -> sf_raw 0 -> scale 0x00, out_scale 0; each -0.0 * 0 = -0.0 and E2M1
// keeps the sign of zero: code 0x8 in every nibble.
const Vector kNegZeros = {"all -0.0",
                          {-0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f,
                           -0.f, -0.f, -0.f, -0.f},
                          0x00,
                          {0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88}};
// +inf, -inf, 2688, 1344, zeros: amax = inf -> sf_raw = inf -> E4M3 saturates to 448 (0x7e);
// out_scale = 1/448; inf -> +6 (7), -inf -> -6 (f), 2688/448 = 6 (7), 1344/448 = 3 (5).
// Byte 0 = 7 | f << 4, byte 1 = 7 | 5 << 4.
const Vector kInfinite = {"+inf, -inf, 2688, 1344, zeros",
                          {kInf, -kInf, 2688, 1344, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                          0x7e,
                          {0xf7, 0x57, 0, 0, 0, 0, 0, 0}};
// NaN, 6, zeros: amax ignores NaN -> 6; sf_raw = 6 * R6 = 1.0000000298 -> 1.0f -> 0x38;
// out_scale 1; NaN encodes as +6 (7), 6 -> 7. Byte 0 = 0x77.
const Vector kWithNaN = {"NaN, 6, zeros",
                         {kNaN, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                         0x38,
                         {0x77, 0, 0, 0, 0, 0, 0, 0}};

struct Case {
  const char* name;
  int64_t num_blocks, block_size, heads, head_size;
  const char* order;
  const char* k_scales;
  const char* v_scales;
  DType dtype;
  std::vector<int64_t> slots;
  std::vector<const Vector*> k_vectors, v_vectors;  // each exact in `dtype`
  float k_scale = 1.0f, v_scale = 1.0f;
};

// gtest prints a failing parameter with this instead of its raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<const Vector*> kAllF32 = {&kV1,   &kV2,       &kZeros,    &kHuge,
                                            &kTiny, &kNegZeros, &kInfinite, &kWithNaN};
const std::vector<const Vector*> kBf16Exact = {&kV1,       &kV2,       &kZeros,
                                               &kNegZeros, &kInfinite, &kWithNaN};
const std::vector<const Vector*> kF16Exact = {&kV1,       &kV2,       &kZeros,  &kHuge,
                                              &kNegZeros, &kInfinite, &kWithNaN};

// Which vector fills (token i, head h, group g) of a side: every vector lands in many positions.
const Vector* pick(const std::vector<const Vector*>& list, int64_t i, int64_t h, int64_t g,
                   int side) {
  return list[static_cast<size_t>((i * 7 + h * 3 + g * 5 + side * 11) %
                                  static_cast<int64_t>(list.size()))];
}

struct Built {
  std::vector<uint8_t> cache;     // after the write
  std::vector<uint8_t> expected;  // by hand
  HandLayout hand;
};

Built build_and_write(const Case& c, int32_t threads = 0, bool scales_by_pointer = false) {
  const int64_t T = static_cast<int64_t>(c.slots.size()), H = c.heads, D = c.head_size;
  const HandLayout hand{
      c.block_size,
      H,
      D,
      std::string(c.order) == "NHD",
      {std::string(c.k_scales) == "sm100_swizzled", std::string(c.v_scales) == "sm100_swizzled"}};
  std::vector<float> rows[2] = {std::vector<float>(T * H * D), std::vector<float>(T * H * D)};
  Built out;
  out.hand = hand;
  out.expected.assign(static_cast<size_t>(c.num_blocks * hand.page_bytes()), kSentinel);
  for (int side = 0; side < 2; ++side) {
    const auto& list = side == 0 ? c.k_vectors : c.v_vectors;
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t g = 0; g < D / 16; ++g) {
          const Vector* v = pick(list, i, h, g, side);
          std::copy(v->x.begin(), v->x.end(), rows[side].begin() + (i * H + h) * D + g * 16);
          const int64_t slot = c.slots[i];
          if (slot < 0) continue;
          uint8_t* page = out.expected.data() + (slot / c.block_size) * hand.page_bytes();
          const int64_t t = slot % c.block_size;
          std::copy(v->data.begin(), v->data.end(), page + hand.data(side, t, h, g));
          page[hand.scale(side, t, h, g)] = v->scale;
        }
      }
    }
  }
  Rows key(c.dtype, rows[0]), value(c.dtype, rows[1]);
  auto opts =
      test::options_for(c.num_blocks, c.block_size, H, D, c.order, c.k_scales, c.v_scales, threads);
  reference_cpu::ReferenceWriter writer(opts);
  EXPECT_EQ(writer.layout().page_bytes(), static_cast<uint64_t>(hand.page_bytes()));
  test::GuardedCache cache(out.expected.size(), kSentinel);
  std::vector<int64_t> slots = c.slots;
  WriteArgs a;
  a.key = key.view(T, H, D);
  a.value = value.view(T, H, D);
  a.slot_mapping = make_view(slots.data(), DType::i64, {T});
  a.cache = cache.view(c.num_blocks, hand.page_bytes());
  float k = c.k_scale, v = c.v_scale;
  if (scales_by_pointer) {
    a.k_scale = a.v_scale = 99.0f;  // must be ignored
    a.k_scale_ptr = &k;
    a.v_scale_ptr = &v;
  } else {
    a.k_scale = k;
    a.v_scale = v;
  }
  const Status s = writer.write(a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cache.guard_damage(), "") << c.name << ": a write landed outside the cache";
  out.cache = cache.contents();
  return out;
}

// Equal caches, or the first differences with where they are.
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want, int64_t page_bytes) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  auto failure = ::testing::AssertionFailure();
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (shown++ < 8) {
      failure << "block " << i / page_bytes << " byte " << i % page_bytes << ": got 0x" << std::hex
              << int(got[i]) << ", expected 0x" << int(want[i]) << std::dec << "\n";
    }
  }
  if (shown == 0) return ::testing::AssertionSuccess();
  return failure << shown << " bytes differ";
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, EveryPageByteIsPinned) {
  const Case& c = GetParam();
  const Built b = build_and_write(c);
  EXPECT_TRUE(same_bytes(b.cache, b.expected, b.hand.page_bytes()));
}

TEST_P(Golden, ScalesByPointerGiveTheSameBytes) {
  const Built b = build_and_write(GetParam(), 0, /*scales_by_pointer=*/true);
  EXPECT_TRUE(same_bytes(b.cache, b.expected, b.hand.page_bytes()));
}

// Reading the golden cache back: every element is E2M1 value x E4M3 scale x k_scale, decoded here
// from the doc's tables, and padding tokens read as zeros.
TEST_P(Golden, ReadBackDecodesTheBytes) {
  const Case& c = GetParam();
  const Built b = build_and_write(c);
  const int64_t T = static_cast<int64_t>(c.slots.size()), H = c.heads, D = c.head_size;
  auto opts = test::options_for(c.num_blocks, c.block_size, H, D, c.order, c.k_scales, c.v_scales);
  reference_cpu::ReferenceReader reader(opts);
  std::vector<uint8_t> cache = b.cache;
  std::vector<int64_t> slots = c.slots;
  std::vector<float> out[2] = {std::vector<float>(T * H * D, 7.0f),
                               std::vector<float>(T * H * D, 7.0f)};
  ReadArgs r;
  r.cache = make_view(cache.data(), DType::u8, {c.num_blocks, b.hand.page_bytes()});
  r.slot_mapping = make_view(slots.data(), DType::i64, {T});
  r.key = make_view(out[0].data(), DType::f32, {T, H, D});
  r.value = make_view(out[1].data(), DType::f32, {T, H, D});
  r.k_scale = c.k_scale;
  r.v_scale = c.v_scale;
  const Status s = reader.read(r);
  ASSERT_TRUE(s.is_ok()) << s.message();

  const float e2m1[8] = {0, .5f, 1, 1.5f, 2, 3, 4, 6};
  auto e4m3 = [](uint8_t byte) {
    const int e = (byte >> 3) & 0xF, m = byte & 7;
    const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                             : std::ldexp(1.0f + static_cast<float>(m) / 8, e - 7);
    return (byte & 0x80) ? -mag : mag;
  };
  for (int side = 0; side < 2; ++side) {
    const auto& list = side == 0 ? c.k_vectors : c.v_vectors;
    const float k_scale = side == 0 ? c.k_scale : c.v_scale;
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t g = 0; g < D / 16; ++g) {
          const Vector* v = pick(list, i, h, g, side);
          for (int e = 0; e < 16; ++e) {
            const float got = out[side][(i * H + h) * D + g * 16 + e];
            float want = 0.0f;
            if (c.slots[i] >= 0) {
              const uint8_t code = (v->data[e / 2] >> (4 * (e % 2))) & 0xF;
              const float q = (code & 8) ? -e2m1[code & 7] : e2m1[code & 7];
              want = q * (e4m3(v->scale) * k_scale);
            }
            ASSERT_EQ(test::bits(got), test::bits(want))
                << "side " << side << " token " << i << " head " << h << " group " << g
                << " element " << e << " (" << v->what << "): got " << got << ", expected " << want;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Caches, Golden,
    ::testing::Values(
        // H=1, D=64, block 4, the SM100 default arrangement, f32, padding and an unwritten block.
        Case{"h1_d64_b4_hnd_sm100_f32",
             3,
             4,
             1,
             64,
             "HND",
             "linear",
             "sm100_swizzled",
             DType::f32,
             {5, -1, 0, 11, 2, -7, 8},
             kAllF32,
             kAllF32},
        // H=2, D=128, block 8, token-major, the arrangements swapped, bf16.
        Case{"h2_d128_b8_nhd_swapped_bf16",
             2,
             8,
             2,
             128,
             "NHD",
             "sm100_swizzled",
             "linear",
             DType::bf16,
             {15, 3, -1, 8, 0, 4, 9},
             kBf16Exact,
             kBf16Exact},
        // H=2, D=64, block 16, linear scales on both sides, f16.
        Case{"h2_d64_b16_hnd_linear_f16",
             2,
             16,
             2,
             64,
             "HND",
             "linear",
             "linear",
             DType::f16,
             {31, 0, 16, -1, 17, 5},
             kF16Exact,
             kF16Exact},
        // H=1, D=128, block 4, token-major, swizzled on both sides; block 1 written in full.
        Case{"h1_d128_b4_nhd_swizzled_f32",
             2,
             4,
             1,
             128,
             "NHD",
             "sm100_swizzled",
             "sm100_swizzled",
             DType::f32,
             {7, 6, 5, 4, -1, 0},
             kAllF32,
             kAllF32},
        // k_scale = 2/448 on K (the doc's scaled row), v_scale 1 on V.
        Case{"h1_d64_b4_k_scale_2_over_448",
             2,
             4,
             1,
             64,
             "HND",
             "linear",
             "sm100_swizzled",
             DType::f32,
             {1, 6, -1, 4},
             {&kScaled, &kZeros, &kNegZeros},
             kAllF32,
             2.0f / 448.0f,
             1.0f}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

// The doc's swizzle check: S = 8, T = 16, token 5, group 3 -> (t', s') = (5, 5), tile offset 45.
TEST(GoldenSwizzle, DocExampleOffset) {
  const HandLayout hand{16, 1, 128, false, {false, true}};
  EXPECT_EQ(hand.scale(1, 5, 0, 3) - hand.scale(1, 0, 0, 0), 45);
  reference_cpu::ReferenceWriter writer(test::options_for(1, 16, 1, 128));
  EXPECT_EQ(writer.layout().scale_offset(Side::v, 5, 0, 3) -
                writer.layout().scale_offset(Side::v, 0, 0, 0),
            45u);
}

// The worked vectors really are exact in the dtypes they are used with.
TEST(GoldenInputs, VectorsAreExactInTheirDtypes) {
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : a == b; };
  for (const Vector* v : kBf16Exact) {
    for (float x : v->x) EXPECT_TRUE(same(test::from_bf16(test::to_bf16(x)), x)) << v->what;
  }
  for (const Vector* v : kF16Exact) {
    for (float x : v->x) EXPECT_TRUE(same(test::from_f16(test::to_f16_exact(x)), x)) << v->what;
  }
}

}  // namespace
}  // namespace kvq
