// The host pieces of kvq-demo's GPU attention (apps/kvq-demo/gpu_attention.h): a decode step's
// block tables and seq_lens, the bytes an attend must move, which steps are checked, the median.
#include "gpu_attention.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvq/core/page_layout.h"

namespace kvq::demo {
namespace {

Sequence sequence(int64_t id, int64_t length, std::vector<int64_t> blocks) {
  Sequence s;
  s.id = id;
  s.length = length;
  s.block_table = std::move(blocks);
  return s;
}

TEST(StepTables, RowsHoldEachSequencesPagesThenMinusOne) {
  const Sequence a = sequence(3, 17, {7, 2});  // 16 + 1 tokens: a page and one token of another
  const Sequence b = sequence(5, 1, {0});
  const Sequence c = sequence(9, 48, {4, 1, 6});
  const StepTables t = build_step_tables({&a, &b, &c}, 16);
  EXPECT_EQ(t.num_seqs, 3);
  EXPECT_EQ(t.max_blocks, 3);
  EXPECT_EQ(t.block_tables, (std::vector<int32_t>{7, 2, -1, 0, -1, -1, 4, 1, 6}));
  EXPECT_EQ(t.seq_lens, (std::vector<int32_t>{17, 1, 48}));
}

TEST(StepTables, NoSequencesNoRows) {
  const StepTables t = build_step_tables({}, 16);
  EXPECT_EQ(t.num_seqs, 0);
  EXPECT_EQ(t.max_blocks, 0);
  EXPECT_TRUE(t.block_tables.empty());
  EXPECT_TRUE(t.seq_lens.empty());
}

TEST(StepTables, RefusesWhatTheAttentionCouldNotTake) {
  auto code_of = [](const Sequence& s) {
    try {
      (void)build_step_tables({&s}, 16);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sequence 1"), std::string::npos) << e.what();
      return e.code();
    }
    return ErrorCode::ok;
  };
  EXPECT_EQ(code_of(sequence(1, 33, {0, 1})), ErrorCode::internal);  // needs 3 blocks
  EXPECT_EQ(code_of(sequence(1, 0, {})), ErrorCode::internal);       // nothing to attend
  EXPECT_EQ(code_of(sequence(1, 16, {-1})), ErrorCode::internal);
  EXPECT_EQ(code_of(sequence(1, 16, {int64_t{1} << 31})), ErrorCode::internal);
  EXPECT_EQ(code_of(sequence(1, 16, {std::numeric_limits<int32_t>::max()})), ErrorCode::ok);
}

CacheSpec spec(const std::string& format, int64_t heads, int64_t head_size, int64_t block_size) {
  CacheSpec c;
  c.format = format;
  c.num_blocks = 8;
  c.block_size = block_size;
  c.num_kv_heads = heads;
  c.head_size = head_size;
  c.layout.order = "HND";
  if (format != "nvfp4") c.layout.k_scales = c.layout.v_scales = "";
  return c;
}

// Every referenced token's K and V bytes with their scale bytes, the table entries its tokens
// name, one seq_len each, the bf16 query and the f32 output.
TEST(AttentionBytes, CountsTokensTablesQueryAndOutput) {
  const PageLayout nvfp4 = PageLayout::from_spec(spec("nvfp4", 4, 128, 16));
  const Sequence a = sequence(0, 1, {3});
  const Sequence b = sequence(1, 17, {0, 5});
  const StepTables t = build_step_tables({&a, &b}, 16);
  const uint64_t token = 2 * 4 * (64 + 8);  // K and V: 4 heads x (64 data + 8 scale bytes)
  EXPECT_EQ(token, nvfp4.page_bytes() / 16);
  const uint64_t expected = 18 * token + (1 + 2) * 4 + 2 * 4 + 2 * 8 * 128 * (2 + 4);
  EXPECT_EQ(attention_bytes(nvfp4, 8, t), expected);

  // Formats without scales: the rows only, as the page holds them.
  for (const char* format : {"bf16", "fp8_e4m3"}) {
    const PageLayout layout = PageLayout::from_spec(spec(format, 2, 64, 8));
    const Sequence s = sequence(0, 9, {1, 2});
    const StepTables one = build_step_tables({&s}, 8);
    const uint64_t per_token = layout.page_bytes() / 8;
    EXPECT_EQ(attention_bytes(layout, 2, one), 9 * per_token + 2 * 4 + 4 + 2 * 64 * 6) << format;
  }
}

TEST(CheckedSteps, TheFirstAndEveryNthAfter) {
  std::vector<int64_t> checked;
  for (int64_t step = 0; step < 40; ++step) {
    if (is_checked_step(step, 16)) checked.push_back(step);
  }
  EXPECT_EQ(checked, (std::vector<int64_t>{0, 16, 32}));
  for (int64_t step = 0; step < 5; ++step) EXPECT_TRUE(is_checked_step(step, 1));
}

TEST(Median, MiddleValueOrMeanOfTheTwo) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({4.0}), 4.0);
  EXPECT_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_EQ(median({8.0, 1.0, 2.0, 4.0}), 3.0);
}

}  // namespace
}  // namespace kvq::demo
