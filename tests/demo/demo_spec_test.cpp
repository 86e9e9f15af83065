// The `demo:` section (apps/kvq-demo/demo_spec.cpp), read through the config's section hook:
// every key parses, the ranges' edges are inclusive, every malformed value is refused at its
// FILE:LINE:COL, and the longest sequence must fit in the cache.
#include "demo_spec.h"

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace kvq::demo {
namespace {

std::optional<DemoSpec> parse(const std::string& yaml, const std::string& source = "<string>") {
  std::optional<DemoSpec> demo;
  parse_config(yaml, source,
               {{kDemoSection, [&](const ConfigSection& s) { demo = parse_demo_section(s); }}});
  return demo;
}

const std::string kCache =
    "cache: {format: nvfp4, num_blocks: 4, block_size: 16, num_kv_heads: 1, head_size: 64}\n";

TEST(DemoSpec, ParsesEveryKey) {
  const std::optional<DemoSpec> d = parse(
      "cache: {format: nvfp4, num_blocks: 1024, block_size: 16, num_kv_heads: 8, head_size: "
      "128}\n"
      "demo:\n  sequences: 5\n  max_batch: 2\n  prompt_tokens: [10, 20]\n  decode_tokens: [0, 8]\n"
      "  query_heads_per_kv_head: 8\n  seed: 7\n  gpu_attention_check_every: 3\n");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->sequences, 5);
  EXPECT_EQ(d->max_batch, 2);
  EXPECT_EQ(d->prompt_tokens[1], 20);
  EXPECT_EQ(d->decode_tokens[0], 0);
  EXPECT_EQ(d->query_heads_per_kv_head, 8);
  EXPECT_EQ(d->seed, 7u);
  EXPECT_EQ(d->gpu_attention_check_every, 3);
}

// A GPU attention's output is compared on 1 decode step in 16 unless the section says otherwise.
TEST(DemoSpec, ChecksOneGpuAttentionStepIn16ByDefault) {
  EXPECT_EQ(DemoSpec{}.gpu_attention_check_every, 16);
  const std::optional<DemoSpec> d =
      parse(kCache + "demo: {seed: 3, prompt_tokens: [1, 16], decode_tokens: [0, 16]}\n");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->gpu_attention_check_every, 16);
}

TEST(DemoSpec, AbsentWithoutASection) {
  EXPECT_FALSE(parse(kCache).has_value());
}

// The bounds of the demo keys are inclusive at the low end: seed 0 is a seed like any other
// (the CLI's --seed takes it too), and decode_tokens may be [0, 0] (prefill only).
TEST(DemoSpec, TakesSeedZeroAndNoDecode) {
  const std::optional<DemoSpec> d =
      parse(kCache +
            "demo: {seed: 0, prompt_tokens: [1, 16], decode_tokens: [0, 0], "
            "max_batch: 1}\n");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->seed, 0u);
  EXPECT_EQ(d->decode_tokens, (std::array<int64_t, 2>{0, 0}));
  EXPECT_EQ(d->max_batch, 1);
}

// The upper edges of the demo ranges are inclusive (the refusals just outside them are in
// malformed_cases).
TEST(DemoSpec, TakesTheTopOfItsRanges) {
  const std::optional<DemoSpec> d = parse(kCache +
                                          "demo: {prompt_tokens: [1, 16], decode_tokens: [0, 16], "
                                          "query_heads_per_kv_head: 1024, max_batch: 65536, "
                                          "gpu_attention_check_every: 1073741824}\n");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->query_heads_per_kv_head, 1024);
  EXPECT_EQ(d->max_batch, 65536);
  EXPECT_EQ(d->gpu_attention_check_every, kMaxGpuAttentionCheckEvery);
  // And the bottom: every step.
  const std::optional<DemoSpec> every = parse(
      kCache +
      "demo: {gpu_attention_check_every: 1, prompt_tokens: [1, 16], decode_tokens: [0, 16]}\n");
  ASSERT_TRUE(every.has_value());
  EXPECT_EQ(every->gpu_attention_check_every, 1);
}

TEST(DemoSpec, FitsItsLongestSequence) {
  DemoSpec demo;
  demo.prompt_tokens = {1, 100};
  demo.decode_tokens = {0, 28};  // 128 tokens: 8 blocks of 16
  CacheSpec cache;
  cache.block_size = 16;
  cache.num_blocks = 8;
  EXPECT_EQ(demo_fit_problem(demo, cache), "");
  demo.decode_tokens[1] = 29;
  EXPECT_EQ(demo_fit_problem(demo, cache),
            "the longest sequence the demo allows (prompt_tokens max 100 + decode_tokens max 29 = "
            "129 tokens) needs 9 blocks of 16 tokens; cache.num_blocks is 8");
}

struct Malformed {
  const char* name;
  std::string yaml;
  int line;
  int column;
  std::string message;  // expected to appear in what()
};

const std::string kCacheHead = "cache:\n  format: nvfp4\n";
const std::string kGeometry =
    "  num_blocks: 8\n  block_size: 16\n  num_kv_heads: 2\n  head_size: 64\n";

std::vector<Malformed> malformed_cases() {
  return {
      {"demo_unknown_key", kCacheHead + kGeometry + "demo:\n  sequence: 3\n", 8, 3,
       "demo.sequence: unknown key 'sequence' in 'demo'"},
      {"demo_bad_range", kCacheHead + kGeometry + "demo:\n  prompt_tokens: [30, 10]\n", 8, 18,
       "demo.prompt_tokens: expected min <= max, found [30, 10]"},
      // min one more than max: refused exactly at the boundary, not only when far apart.
      {"demo_bad_range_by_one", kCacheHead + kGeometry + "demo:\n  prompt_tokens: [6, 5]\n", 8, 18,
       "demo.prompt_tokens: expected min <= max, found [6, 5]"},
      // Just outside the documented ranges: a batch of 0 would schedule nothing; GQA groups
      // above 1024 and token ranges above 2^24 are refused before any buffer is sized.
      {"demo_zero_batch", kCacheHead + kGeometry + "demo:\n  max_batch: 0\n", 8, 14,
       "demo.max_batch: expected an integer in [1, 65536], found 0"},
      {"demo_gqa_too_large", kCacheHead + kGeometry + "demo:\n  query_heads_per_kv_head: 1025\n", 8,
       28, "demo.query_heads_per_kv_head: expected an integer in [1, 1024], found 1025"},
      // A period of 0 would never check (and divide by zero); above 2^30 is refused too.
      {"demo_check_every_zero", kCacheHead + kGeometry + "demo:\n  gpu_attention_check_every: 0\n",
       8, 30, "demo.gpu_attention_check_every: expected an integer in [1, 1073741824], found 0"},
      {"demo_check_every_too_large",
       kCacheHead + kGeometry + "demo:\n  gpu_attention_check_every: 1073741825\n", 8, 30,
       "demo.gpu_attention_check_every: expected an integer in [1, 1073741824], found "
       "1073741825"},
      {"demo_range_too_long", kCacheHead + kGeometry + "demo:\n  prompt_tokens: [1, 16777217]\n", 8,
       22, "demo.prompt_tokens[1]: expected an integer in [1, 16777216], found 16777217"},
      {"demo_range_not_pair", kCacheHead + kGeometry + "demo:\n  decode_tokens: 5\n", 8, 18,
       "demo.decode_tokens: expected [min, max], found '5'"},
      {"demo_longer_than_cache",
       kCacheHead + kGeometry + "demo:\n  prompt_tokens: [10, 120]\n  decode_tokens: [0, 9]\n", 8,
       18,
       "demo.prompt_tokens: the longest sequence the demo allows (prompt_tokens max 120 + "
       "decode_tokens max 9 = 129 tokens) needs 9 blocks of 16 tokens; cache.num_blocks is 8"},
      {"demo_not_map", kCacheHead + kGeometry + "demo: 5\n", 7, 7,
       "demo: expected a mapping, found '5'"},
  };
}

class DemoSpecMalformed : public testing::TestWithParam<Malformed> {};

TEST_P(DemoSpecMalformed, NamesLineColumnAndKey) {
  const Malformed& m = GetParam();
  try {
    parse(m.yaml, "bad.yaml");
    FAIL() << m.name << ": parsed without error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(m.message), std::string::npos) << what;
    EXPECT_EQ(e.mark().line, m.line) << what;
    EXPECT_EQ(e.mark().column, m.column) << what;
    EXPECT_EQ(
        what.rfind("bad.yaml:" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": ", 0),
        0u)
        << what;
  }
}

INSTANTIATE_TEST_SUITE_P(All, DemoSpecMalformed, testing::ValuesIn(malformed_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace kvq::demo
