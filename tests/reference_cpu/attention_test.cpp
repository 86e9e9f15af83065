// The reference attention against a direct f64 attention: on the rows read back from the pages
// (the same values: only the f32 output rounding apart) and on the rows originally written (the
// format's quantization error apart), for every format, layout and GQA 1/4/8; and its refusals.
#include <gtest/gtest.h>

#include <vector>

#include "attention_case.h"
#include "kvq/core/contract.h"
#include "kvq/reference_cpu/reference_attention.h"

namespace kvq {
namespace {

struct Layout {
  const char* format;
  const char* order;
  const char* k_scales;
  const char* v_scales;
};

const Layout kLayouts[] = {
    {"nvfp4", "HND", "linear", "sm100_swizzled"},
    {"nvfp4", "NHD", "linear", "linear"},
    {"nvfp4", "HND", "sm100_swizzled", "linear"},
    {"nvfp4", "NHD", "sm100_swizzled", "sm100_swizzled"},
    {"fp8_e4m3", "HND", "", ""},
    {"fp8_e5m2", "NHD", "", ""},
    {"bf16", "HND", "", ""},
    {"bf16", "NHD", "", ""},
};

// Attention error against the original rows that each format's quantization allows (max abs
// error over max |output|).
double quantization_bound(const std::string& format) {
  return format == "nvfp4" ? 0.4 : format == "bf16" ? 0.01 : 0.15;
}

std::vector<double> attend(test::AttentionCase& c) {
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention attention(layout, 2);
  std::vector<float> out;
  AttentionArgs a = test::host_attention_args(c, layout, &out);
  const Status s = attention.attend(a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return {out.begin(), out.end()};
}

TEST(ReferenceAttention, MatchesDirectAttentionEveryFormatLayoutAndGroup) {
  uint64_t seed = 1;
  for (const Layout& l : kLayouts) {
    for (int64_t group : {1, 4, 8}) {
      test::AttentionShape shape;
      shape.format = l.format;
      shape.order = l.order;
      shape.k_scales = l.k_scales;
      shape.v_scales = l.v_scales;
      shape.num_kv_heads = 2;
      shape.group = group;
      shape.head_size = group == 4 ? 64 : 128;
      shape.block_size = group == 8 ? 4 : 16;
      shape.seq_lens = {1, 37, 0, 130};
      shape.query_dtype = group == 4 ? DType::f16 : DType::bf16;
      test::AttentionCase c = test::make_attention_case(shape, seed++);
      SCOPED_TRACE(c.describe());
      const std::vector<double> got = attend(c);
      const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_size));
      std::vector<float> k, v;
      test::read_back(c, &k, &v);
      EXPECT_LT(test::max_error_ratio(got, test::direct_attention(c, k, v, scale)), 1e-6);
      EXPECT_LT(test::max_error_ratio(got, test::direct_attention(c, c.key, c.value, scale)),
                quantization_bound(l.format));
      // The padding sequence (length 0) gives zeros.
      const auto row = static_cast<size_t>(c.num_q_heads * shape.head_size);
      for (size_t e = 2 * row; e < 3 * row; ++e) ASSERT_EQ(got[e], 0.0) << e;
    }
  }
}

TEST(ReferenceAttention, OutputDtypesAreTheF32ResultRounded) {
  test::AttentionShape shape;
  shape.seq_lens = {20, 3};
  test::AttentionCase c = test::make_attention_case(shape, 7);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention attention(layout, 1);
  std::vector<float> f32;
  AttentionArgs a = test::host_attention_args(c, layout, &f32);
  ASSERT_TRUE(attention.attend(a).is_ok());
  std::vector<uint16_t> bf16(f32.size());
  a.output = make_view(bf16.data(), DType::bf16, {c.num_seqs, c.num_q_heads, shape.head_size});
  ASSERT_TRUE(attention.attend(a).is_ok());
  for (size_t i = 0; i < f32.size(); ++i) ASSERT_EQ(bf16[i], float_to_bf16(f32[i])) << i;
}

TEST(ReferenceAttention, RefusesHostValuesOutOfRangeAndBadShapes) {
  test::AttentionShape shape;
  shape.seq_lens = {20, 3};
  test::AttentionCase c = test::make_attention_case(shape, 9);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention attention(layout, 1);
  std::vector<float> out;
  {
    AttentionArgs a = test::host_attention_args(c, layout, &out);
    c.block_tables[1] = static_cast<int32_t>(c.spec.num_blocks);
    const Status s = attention.attend(a);
    EXPECT_EQ(s.code(), ErrorCode::out_of_range);
    EXPECT_NE(s.message().find("block_tables[0, 1] = "), std::string::npos) << s.message();
    c.block_tables[1] = 0;
  }
  {
    AttentionArgs a = test::host_attention_args(c, layout, &out);
    c.seq_lens[1] = static_cast<int32_t>(c.max_blocks * shape.block_size + 1);
    const Status s = attention.attend(a);
    EXPECT_EQ(s.code(), ErrorCode::out_of_range);
    EXPECT_NE(s.message().find("seq_lens[1] = "), std::string::npos) << s.message();
    c.seq_lens[1] = 3;
  }
  {
    AttentionArgs a = test::host_attention_args(c, layout, &out);
    a.query.shape[1] = 3;  // not a multiple of num_kv_heads 2
    const Status s = attention.attend(a);
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_NE(s.message().find("multiple of num_kv_heads"), std::string::npos) << s.message();
  }
  {
    AttentionArgs a = test::host_attention_args(c, layout, &out);
    a.softmax_scale = -1.0f;
    const Status s = attention.attend(a);
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_NE(s.message().find("softmax_scale = -1"), std::string::npos) << s.message();
  }
  {
    AttentionArgs a = test::host_attention_args(c, layout, &out);
    a.output = make_view(c.cache.data(), DType::f32, {c.num_seqs, c.num_q_heads, 128});
    const Status s = attention.attend(a);
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_NE(s.message().find("output and cache share memory"), std::string::npos) << s.message();
  }
}

TEST(ReferenceAttention, DefaultSoftmaxScaleIsOneOverSqrtHeadSize) {
  test::AttentionShape shape;
  shape.seq_lens = {50};
  test::AttentionCase c = test::make_attention_case(shape, 11);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention attention(layout, 1);
  std::vector<float> by_default, given;
  AttentionArgs a = test::host_attention_args(c, layout, &by_default);
  ASSERT_TRUE(attention.attend(a).is_ok());
  AttentionArgs b = test::host_attention_args(c, layout, &given);
  b.softmax_scale = default_softmax_scale(shape.head_size);
  ASSERT_TRUE(attention.attend(b).is_ok());
  EXPECT_EQ(by_default, given);
}

}  // namespace
}  // namespace kvq
