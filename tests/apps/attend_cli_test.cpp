// `kvq attend` end to end with the reference_cpu plugin: a cache written by `kvq write`, a query
// file, and the output against the reference attention computed in-process on the same pages;
// exit statuses 0 / 1 / 2 with one stderr line naming the file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "attention_case.h"
#include "kvq/io/safetensors.h"
#include "kvq/reference_cpu/reference_attention.h"
#include "kvq_cli_fixture.h"

namespace kvq {
namespace {

class AttendCli : public test::KvqCliTest {
 protected:
  // The case's config, its cache through `kvq write`, and its query file.
  void prepare(test::AttentionCase& c) {
    const CacheSpec& s = c.spec;
    std::string layout = fmt::format("{{ order: {}", s.layout.order);
    if (!s.layout.k_scales.empty()) layout += ", k_scales: " + s.layout.k_scales;
    if (!s.layout.v_scales.empty()) layout += ", v_scales: " + s.layout.v_scales;
    layout += " }";
    const std::string config = fmt::format(
        "backend: reference_cpu\ndevice: cpu\nthreads: 2\ncache:\n  format: {}\n  num_blocks: "
        "{}\n  block_size: {}\n  num_kv_heads: {}\n  head_size: {}\n  layout: {}\n  k_scale: "
        "{}\n  v_scale: {}\nlog: {{ level: warn }}\n",
        s.format, s.num_blocks, s.block_size, s.num_kv_heads, s.head_size, layout, c.k_scale,
        c.v_scale);
    std::ofstream(path("c.yaml")) << config;
    const int64_t H = s.num_kv_heads, D = s.head_size;
    key_.resize(c.key.size());
    value_.resize(c.value.size());
    for (size_t i = 0; i < c.key.size(); ++i) {
      key_[i] = float_to_bf16(c.key[i]);
      value_[i] = float_to_bf16(c.value[i]);
    }
    save_safetensors(path("kv.safetensors"),
                     {{"key", make_view(key_.data(), DType::bf16, {c.num_tokens, H, D})},
                      {"value", make_view(value_.data(), DType::bf16, {c.num_tokens, H, D})},
                      {"slot_mapping", make_view(c.slots.data(), DType::i64, {c.num_tokens})}});
    const test::CliResult w = kvq(fmt::format("write {} --input {} --output {}", path("c.yaml"),
                                              path("kv.safetensors"), path("cache.safetensors")));
    ASSERT_EQ(w.status, 0) << w.err;
    save_query(c, path("q.safetensors"));
  }

  void save_query(test::AttentionCase& c, const std::string& file) {
    save_safetensors(
        file,
        {{"query", make_view(c.query.data(), c.shape.query_dtype,
                             {c.num_seqs, c.num_q_heads, c.shape.head_size})},
         {"block_tables", make_view(c.block_tables.data(), DType::i32, {c.num_seqs, c.max_blocks})},
         {"seq_lens", make_view(c.seq_lens.data(), DType::i32, {c.num_seqs})}});
  }

  std::vector<uint16_t> key_, value_;
};

TEST_F(AttendCli, OutputIsTheReferenceAttentionOverTheWrittenPages) {
  test::AttentionShape shape;
  shape.num_kv_heads = 2;
  shape.group = 4;
  shape.seq_lens = {100, 7, 0};
  test::AttentionCase c = test::make_attention_case(shape, 31);
  prepare(c);
  ASSERT_FALSE(HasFatalFailure());
  const test::CliResult r =
      kvq(fmt::format("attend {} --cache {} --query {} --output {}", path("c.yaml"),
                      path("cache.safetensors"), path("q.safetensors"), path("out.safetensors")));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("attended 3 sequences x 8 query heads"), std::string::npos) << r.out;

  const SafetensorsFile out = SafetensorsFile::load(path("out.safetensors"));
  const SafetensorsTensor& o = out.at("output");
  ASSERT_EQ(o.dtype, DType::f32);
  ASSERT_EQ(o.shape, (std::vector<int64_t>{3, 8, 128}));
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention ref(layout, 1);
  std::vector<float> want;
  AttentionArgs a = test::host_attention_args(c, layout, &want);
  ASSERT_TRUE(ref.attend(a).is_ok());
  const TensorView v = o.view();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(v.ptr<const float>()[i], want[i]) << i;
  }
}

TEST_F(AttendCli, BadQueryFilesAndValuesExitTwoNamingTheFile) {
  test::AttentionShape shape;
  shape.num_kv_heads = 2;
  shape.group = 2;
  shape.seq_lens = {40, 20};
  test::AttentionCase c = test::make_attention_case(shape, 32);
  prepare(c);
  ASSERT_FALSE(HasFatalFailure());
  const std::string q = path("q.safetensors");
  auto attend = [&] {
    return kvq(fmt::format("attend {} --cache {} --query {} --output {}", path("c.yaml"),
                           path("cache.safetensors"), q, path("out.safetensors")));
  };
  c.block_tables[1] = static_cast<int32_t>(c.spec.num_blocks);  // sequence 0's second page
  save_query(c, q);
  test::CliResult r = attend();
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(q + ": block_tables[0, 1] = "), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("out.safetensors")));
  c.block_tables[1] = 0;

  c.seq_lens[1] = -1;
  save_query(c, q);
  r = attend();
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("seq_lens[1] = -1"), std::string::npos) << r.err;
  c.seq_lens[1] = 20;

  std::vector<int32_t> lens = c.seq_lens;
  save_safetensors(q, {{"query", make_view(c.query.data(), DType::bf16, {2, 3, 128})},
                       {"block_tables",
                        make_view(c.block_tables.data(), DType::i32, {c.num_seqs, c.max_blocks})},
                       {"seq_lens", make_view(lens.data(), DType::i32, {2})}});
  r = attend();
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(q + ": tensor 'query': BF16 [2, 3, 128]: expected"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kvq
