// kvq bench's pieces without a plugin: the sweep, the inputs, the byte counts, and the runner
// driven by a fake writer/reader on a fake runtime whose times are known, so GB/s and the input
// rotation can be checked exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <string>

#include "bench_data.h"
#include "bench_plan.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "bench_stats.h"
#include "fake_runtime.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq::app::bench {
namespace {

// ---- plan --------------------------------------------------------------------------------------

TEST(BenchPlan, DefaultGpuSweepIsTheIssues) {
  const auto cases = make_plan(PlanRequest{});
  // 6 shapes x 8 token counts at block_size 16, plus 8 x 2 more block sizes for (8, 128).
  ASSERT_EQ(cases.size(), 6u * 8 + 2u * 8);
  std::map<std::tuple<int64_t, int64_t>, std::set<int64_t>> block_sizes;
  std::set<int64_t> tokens;
  for (const Case& c : cases) {
    block_sizes[{c.num_kv_heads, c.head_size}].insert(c.block_size);
    tokens.insert(c.tokens);
    EXPECT_EQ(c.threads, 0);
  }
  EXPECT_EQ(tokens, (std::set<int64_t>{1, 16, 64, 256, 1024, 4096, 16384, 65536}));
  EXPECT_EQ(block_sizes.size(), 6u);
  EXPECT_EQ((block_sizes[{8, 128}]), (std::set<int64_t>{16, 64, 128}));
  EXPECT_EQ((block_sizes[{32, 128}]), (std::set<int64_t>{16}));
  EXPECT_EQ((block_sizes[{8, 256}]), (std::set<int64_t>{16}));
  EXPECT_EQ(cases.front(), (Case{8, 128, 16, 1, 0}));
}

TEST(BenchPlan, CpuSweepIsSmallAndPerThreadCount) {
  PlanRequest r;
  r.cpu = true;
  const auto cases = make_plan(r);
  ASSERT_EQ(cases.size(), 2u * 6 * 2);  // 2 shapes x T <= 4096 x threads {1, 2}
  for (const Case& c : cases) {
    EXPECT_LE(c.tokens, kCpuMaxDefaultTokens);
    EXPECT_TRUE(c.threads == 1 || c.threads == 2);
  }
  EXPECT_EQ(cases[0], (Case{8, 128, 16, 1, 1}));
  EXPECT_EQ(cases[1], (Case{8, 128, 16, 1, 2}));
  r.tokens = std::vector<int64_t>{65536};  // --tokens lifts the CPU cap
  r.threads = std::vector<int32_t>{3};
  r.shapes = parse_shapes("4x64x32");
  EXPECT_EQ(make_plan(r), (std::vector<Case>{{4, 64, 32, 65536, 3}}));
}

TEST(BenchPlan, ShapesListWithAndWithoutBlockSize) {
  EXPECT_EQ(parse_shapes("8x128,1x64x32"),
            (std::vector<Shape>{{8, 128, std::nullopt}, {1, 64, 32}}));
  PlanRequest r;
  r.shapes = parse_shapes("8x128,1x64x32");
  r.tokens = std::vector<int64_t>{16};
  EXPECT_EQ(
      make_plan(r),
      (std::vector<Case>{
          {8, 128, 16, 16, 0}, {8, 128, 64, 16, 0}, {8, 128, 128, 16, 0}, {1, 64, 32, 16, 0}}));
}

TEST(BenchPlan, BadListsNameTheItem) {
  for (const char* bad : {"8x", "8x128x", "x128", "8*128", "8x128,", "0x128", "8x-128", "8x12a",
                          "8", "8x128x16x9" /* 4 fields: one too many, not ignored */}) {
    try {
      parse_shapes(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("--shapes: expected HEADSxHEAD_SIZE"), std::string::npos)
          << e.what();
    }
  }
  try {
    parse_positive_list("1,16,zero", "--tokens");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--tokens: expected a comma-separated list of positive integers, found 'zero' in "
              "'1,16,zero'");
  }
  EXPECT_EQ(parse_positive_list("1,16,65536", "--tokens"), (std::vector<int64_t>{1, 16, 65536}));
  EXPECT_THROW(parse_positive_list("0", "--tokens"), Error);
  EXPECT_THROW(parse_positive_list("", "--tokens"), Error);
}

// The maximum is inclusive: --threads 4096 (Config::kMaxThreads) is taken, 4097 refused with
// the range in the message.
TEST(BenchPlan, ListMaximumIsInclusive) {
  EXPECT_EQ(parse_positive_list("1,4096", "--threads", 4096), (std::vector<int64_t>{1, 4096}));
  try {
    parse_positive_list("4097", "--threads", 4096);
    ADD_FAILURE() << "4097 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--threads: expected a comma-separated list of integers in [1, 4096], found '4097' "
              "in '4097'");
  }
}

// ---- inputs ------------------------------------------------------------------------------------

TEST(BenchData, SlotPlanPadsFivePercentAndShufflesPages) {
  for (int64_t tokens : {1, 16, 20, 64, 1000, 4096}) {
    for (int64_t bs : {16, 64}) {
      const SlotPlan p = make_slot_plan(tokens, bs, 7);
      const int64_t padding = tokens * 5 / 100;
      ASSERT_EQ(p.slots.size(), static_cast<size_t>(tokens));
      EXPECT_EQ(p.valid_tokens, tokens - padding);
      EXPECT_EQ(std::count(p.slots.begin(), p.slots.end(), -1), padding);
      EXPECT_EQ(p.num_blocks, std::max<int64_t>(1, (p.valid_tokens + bs - 1) / bs));
      std::set<int64_t> seen;
      int64_t i = 0;
      for (int64_t s : p.slots) {
        if (s < 0) continue;
        EXPECT_LT(s, p.num_blocks * bs);
        EXPECT_EQ(s % bs, i % bs) << "valid token " << i << " fills its page in order";
        EXPECT_TRUE(seen.insert(s).second) << "slot " << s << " twice";
        ++i;
      }
    }
  }
  // Pages in a random order: the first valid token of 4096 does not land in page 0 by rule.
  const SlotPlan a = make_slot_plan(4096, 16, 1), b = make_slot_plan(4096, 16, 2);
  EXPECT_NE(a.slots, b.slots);
  std::vector<int64_t> page_order;
  for (int64_t s : a.slots) {
    if (s >= 0 && (page_order.empty() || page_order.back() != s / 16)) page_order.push_back(s / 16);
  }
  EXPECT_FALSE(std::is_sorted(page_order.begin(), page_order.end()));
  EXPECT_EQ(make_slot_plan(4096, 16, 1).slots, a.slots) << "deterministic for a seed";
}

// floor(T x 5%) for every T the bench may take and past it: T x 5 overflowed 64 bits from
// T = 2^63 / 5 on (UBSan: signed integer overflow; a plain build got a negative padding).
TEST(BenchData, PaddingIsFivePercentRoundedDownForAnyTokenCount) {
  for (int64_t t : {0, 1, 19, 20, 99, 100, 101, 4096, 65536}) {
    EXPECT_EQ(padding_tokens(t), t * 5 / 100) << t;
  }
  EXPECT_EQ(padding_tokens(kMaxTokens), 107374182);  // floor((2^31 - 1) / 20)
  EXPECT_EQ(padding_tokens(2'000'000'000'000'000'000), 100'000'000'000'000'000);
  EXPECT_EQ(padding_tokens(std::numeric_limits<int64_t>::max()), 461'168'601'842'738'790);
}

TEST(BenchData, RandomBf16IsNeverZeroNorNonFinite) {
  std::vector<uint16_t> v(100003);
  fill_random_bf16(v.data(), v.size(), 42);
  std::set<uint16_t> distinct(v.begin(), v.end());
  EXPECT_EQ(distinct.size(), 2048u) << "every sign x 8 exponents x 128 mantissas";
  int negative = 0;
  for (uint16_t b : v) {
    ASSERT_NE(b & 0x7FFF, 0) << "zero";
    ASSERT_NE(b & 0x7F80, 0x7F80) << "Inf/NaN";
    float f;
    const uint32_t bits = uint32_t{b} << 16;
    std::memcpy(&f, &bits, 4);
    ASSERT_GE(std::abs(f), 1.0f / 64);
    ASSERT_LT(std::abs(f), 4.0f);
    negative += f < 0;
  }
  EXPECT_NEAR(negative, static_cast<int>(v.size() / 2), static_cast<int>(v.size() / 50));
}

TEST(BenchData, RandomPageBytesHoldNoNanScale) {
  std::vector<uint8_t> v(70001);
  fill_random_page_bytes(v.data(), v.size(), 3);
  std::set<uint8_t> distinct(v.begin(), v.end());
  EXPECT_EQ(distinct.size(), 254u);
  EXPECT_EQ(distinct.count(0x7F), 0u);
  EXPECT_EQ(distinct.count(0xFF), 0u);
}

// ---- statistics and bytes ----------------------------------------------------------------------

TEST(BenchStats, MedianMinMaxKeepSamplesInOrder) {
  const TimingSummary s = summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(s.iterations, 4);
  EXPECT_DOUBLE_EQ(s.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 4.0);
  EXPECT_EQ(s.samples_ms, (std::vector<double>{4.0, 1.0, 3.0, 2.0}));
  EXPECT_DOUBLE_EQ(summarize({5.0, 1.0, 9.0}).median_ms, 5.0);
  EXPECT_THROW(summarize({}), Error);
}

TEST(BenchStats, LeastBytesOfTheIssue) {
  RowBytes row;
  row.packed_row_bytes = 128 / 2 + 128 / 16;
  // T = 65536, no padding: 2*T*H*D*2 read + 2*T*H*(D/2+D/16) written + 8*T slots.
  const ByteCounts w = write_bytes(65536, 65536, 8, 128, row);
  EXPECT_EQ(w.read, 2ull * 65536 * 8 * 128 * 2 + 8ull * 65536);
  EXPECT_EQ(w.written, 2ull * 65536 * 8 * 72);
  // Padding rows move nothing but their slot.
  const ByteCounts p = write_bytes(100, 95, 8, 128, row);
  EXPECT_EQ(p.read, 2ull * 95 * 8 * 128 * 2 + 800);
  EXPECT_EQ(p.written, 2ull * 95 * 8 * 72);
  // The reader writes every row (zeros for padding) as f32.
  const ByteCounts r = read_bytes(100, 95, 8, 128, row);
  EXPECT_EQ(r.read, 2ull * 95 * 8 * 72 + 800);
  EXPECT_EQ(r.written, 2ull * 100 * 8 * 128 * 4);
  EXPECT_DOUBLE_EQ(gigabytes_per_second(2'000'000'000, 1000.0), 2.0);
  EXPECT_DOUBLE_EQ(percent_of_copy(2.0, 4e9), 50.0);
}

// ---- runner with fakes -------------------------------------------------------------------------

using kvq::testing::FakeRuntime;

// Checks what the bench hands a writer; remembers the sets it was given.
class FakeWriter final : public KVCacheWriter {
 public:
  explicit FakeWriter(const BackendOptions& o) : layout_(make_layout(o.cache)), spec_(o.cache) {}
  Status write(const WriteArgs& a) noexcept override {
    const auto T = a.key.size(0);
    if (a.key.ndim != 3 || a.key.size(1) != spec_.num_kv_heads ||
        a.key.size(2) != spec_.head_size || a.key.dtype != DType::bf16 ||
        a.value.dtype != DType::bf16 || a.slot_mapping.dtype != DType::i64 ||
        a.slot_mapping.size(0) != T || a.cache.size(0) != spec_.num_blocks ||
        a.cache.size(1) != static_cast<int64_t>(layout_->page_bytes()) ||
        a.k_scale != spec_.k_scale || a.v_scale != spec_.v_scale) {
      return {ErrorCode::invalid_argument, "fake writer: unexpected arguments"};
    }
    const auto* k = a.key.ptr<uint16_t>();
    for (int64_t i = 0; i < a.key.numel(); ++i) {
      if ((k[i] & 0x7FFF) == 0) return {ErrorCode::invalid_argument, "fake writer: zero input"};
    }
    const auto* slots = a.slot_mapping.ptr<int64_t>();
    for (int64_t t = 0; t < T; ++t) {
      if (slots[t] >= spec_.num_blocks * spec_.block_size) {
        return {ErrorCode::out_of_range, "fake writer: slot out of range"};
      }
    }
    keys.push_back(a.key.data);
    key_views.push_back(a.key);
    value_views.push_back(a.value);
    caches.push_back(a.cache.data);
    // Every set holds the same inputs (one set made on the host, replicated).
    const auto* v = a.value.ptr<uint16_t>();
    contents.insert(std::string(reinterpret_cast<const char*>(k), a.key.numel() * 2) +
                    std::string(reinterpret_cast<const char*>(v), a.value.numel() * 2) +
                    std::string(reinterpret_cast<const char*>(slots), T * 8));
    return Status::ok();
  }
  const PageLayout& layout() const noexcept override { return *layout_; }
  Device device() const noexcept override { return Device::cpu(); }
  Status take_out_of_range_slots(int64_t* n) noexcept override {
    *n = 0;
    return Status::ok();
  }
  std::vector<void*> keys, caches;
  std::vector<TensorView> key_views, value_views;
  std::set<std::string> contents;

 private:
  std::unique_ptr<PageLayout> layout_;
  CacheSpec spec_;
};

class FakeReader final : public KVCacheReader {
 public:
  explicit FakeReader(const BackendOptions& o) : layout_(make_layout(o.cache)) {}
  Status read(const ReadArgs& a) noexcept override {
    if (a.key.dtype != DType::f32 || a.key.ndim != 3) {
      return {ErrorCode::invalid_argument, "fake reader: unexpected output"};
    }
    outputs.push_back(a.key.data);
    return Status::ok();
  }
  const PageLayout& layout() const noexcept override { return *layout_; }
  Device device() const noexcept override { return Device::cpu(); }
  std::vector<void*> outputs;

 private:
  std::unique_ptr<PageLayout> layout_;
};

struct Fakes {
  FakeRuntime runtime;
  std::shared_ptr<FakeWriter> writer;
  std::shared_ptr<FakeReader> reader;
  std::vector<int32_t> writer_threads;  // BackendOptions::threads of each writer made
  Target target() {
    Target t;
    t.runtime = &runtime;
    t.base.cache.k_scale = 0.5f;
    t.base.cache.v_scale = 0.25f;
    t.make_writer = [this](const BackendOptions& o) {
      writer_threads.push_back(o.threads);
      writer = std::make_shared<FakeWriter>(o);
      return writer;
    };
    t.make_reader = [this](const BackendOptions& o) {
      reader = std::make_shared<FakeReader>(o);
      return reader;
    };
    return t;
  }
};

Settings small_settings() {
  Settings s;
  s.rotation_bytes = 1 << 20;
  s.warmup = 2;
  return s;
}

TEST(BenchRunner, TimesWriteAndReadWithKnownBytesAndRotates) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 7;
  CaseResult r;
  {
    CaseRunner runner(f.target(), s);
    r = runner.run({8, 128, 16, 64, 0});
  }
  EXPECT_EQ(f.runtime.live, 0) << "every buffer released";
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.valid_tokens, 61);
  EXPECT_EQ(r.padding_tokens, 3);
  EXPECT_EQ(r.num_blocks, 4);
  EXPECT_EQ(r.page_bytes, 16u * 8 * 2 * 72);
  ASSERT_TRUE(r.write && r.read);

  // Direct launches: 2 ms each; graph replays: 1 ms each (T <= 1024).
  EXPECT_EQ(r.write->direct.iterations, 7);
  EXPECT_DOUBLE_EQ(r.write->direct.median_ms, 2.0);
  ASSERT_TRUE(r.write->graph);
  EXPECT_DOUBLE_EQ(r.write->graph->median_ms, 1.0);
  EXPECT_EQ(r.write->bytes.total(), 2ull * 61 * 8 * (256 + 72) + 8 * 64);
  EXPECT_EQ(r.write->bytes_all_rows.total(), 2ull * 64 * 8 * (256 + 72) + 8 * 64);  // issue 7's

  // One set: K + V 262144 + slots 512 + 4 pages 73728 = 336384 bytes; 1 MiB takes 4 sets.
  EXPECT_EQ(r.write->sets, 4);
  const auto sets = static_cast<size_t>(r.write->sets);
  // Every launch takes the next set: consecutive writes never share an input or a cache.
  const auto& keys = f.writer->keys;
  ASSERT_EQ(keys.size(), 2u + 7 + 2 + 7);  // direct: warm-up + timed; graph: the same
  for (size_t i = 1; i < keys.size(); ++i) {
    EXPECT_NE(keys[i], keys[i - 1]);
    EXPECT_NE(f.writer->caches[i], f.writer->caches[i - 1]);
    if (i >= sets) {
      EXPECT_EQ(keys[i], keys[i - sets]);
    }
  }
  EXPECT_EQ(std::set<void*>(keys.begin(), keys.end()).size(), sets);
  EXPECT_EQ(f.writer->contents.size(), 1u) << "every set holds the same keys, values and slots";
  // The runtime got the warm-up and graph requests; no automatic probe with --iterations.
  ASSERT_EQ(f.runtime.options.size(), 4u);
  EXPECT_EQ(f.runtime.options[0].warmup, 2);
  EXPECT_FALSE(f.runtime.options[0].graph);
  EXPECT_TRUE(f.runtime.options[1].graph);
  EXPECT_EQ(f.runtime.fills, 2) << "caches scrubbed before the writer and before the reader";

  // The reader rotates its own outputs: 2 * 262144 + 512 + 73728 bytes a set, so 2 sets.
  EXPECT_EQ(r.read->sets, 2);
  const auto& outs = f.reader->outputs;
  ASSERT_EQ(outs.size(), 18u);
  EXPECT_NE(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  EXPECT_EQ(r.read->bytes.read, 2ull * 61 * 8 * 72 + 8 * 64);
  EXPECT_EQ(r.read->bytes.written, 2ull * 64 * 8 * 128 * 4);
}

TEST(BenchRunner, AtLeastTwoSetsAndAtMostMaxSets) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 1;
  s.max_sets = 8;
  CaseRunner runner(f.target(), s);
  EXPECT_EQ(runner.run({8, 128, 16, 1024, 0}).write->sets, 2) << "one set is over 1 MiB";
  EXPECT_EQ(f.writer->contents.size(), 1u) << "large sets are uploaded one by one";
  EXPECT_EQ(runner.run({1, 128, 16, 1, 0}).write->sets, 8) << "tiny sets: capped";
  EXPECT_EQ(f.writer->contents.size(), 1u) << "tiny sets are staged together";
}

// Every timing takes Settings::iterations runs after its warm-ups, however slow a launch is
// (issue 7: at least 50, on every backend); graphs only up to graph_max_tokens.
TEST(BenchRunner, EveryTimingTakesTheSetIterationsAndGraphsStopAtTheirBar) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 50;
  s.warmup = 2;
  s.graph_max_tokens = 1024;
  CaseRunner runner(f.target(), s);
  const CaseResult r = runner.run({1, 64, 16, 2048, 0});
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.write->direct.iterations, 50);
  EXPECT_FALSE(r.write->graph);
  EXPECT_EQ(r.write->graph_note, "T > 1024");
  ASSERT_GE(f.runtime.options.size(), 2u);
  for (const TimingOptions& o : f.runtime.options) {
    EXPECT_EQ(o.iterations, 50);
    EXPECT_EQ(o.warmup, 2);
  }
}

// graph_max_tokens is the largest T still timed as a graph ("T > N" is the note): the default
// GPU sweep's T = 1024 cases must get their graph column.
TEST(BenchRunner, GraphsAreTimedAtExactlyGraphMaxTokens) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 1;
  s.graph_max_tokens = 64;
  CaseRunner runner(f.target(), s);
  const CaseResult at = runner.run({1, 64, 16, 64, 0});
  ASSERT_TRUE(at.error.empty()) << at.error;
  EXPECT_TRUE(at.write->graph);
  EXPECT_TRUE(at.read->graph);
  EXPECT_EQ(at.write->graph_note, "");
  const CaseResult above = runner.run({1, 64, 16, 65, 0});
  EXPECT_FALSE(above.write->graph);
  EXPECT_EQ(above.write->graph_note, "T > 64");
}

// A case's thread count reaches the backend as given, 1 included: the CPU sweep's threads=1 row
// must run single-threaded, not with the backend's default. 0 keeps the target's own setting.
TEST(BenchRunner, CaseThreadsReachTheBackend) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 1;
  Target t = f.target();
  t.base.threads = 3;
  CaseRunner runner(t, s);
  for (int32_t n : {1, 2, 0}) ASSERT_TRUE(runner.run({1, 64, 16, 16, n}).error.empty());
  EXPECT_EQ(f.writer_threads, (std::vector<int32_t>{1, 2, 3}));
}

// Keys and values are drawn from their own seeds: a write of V equal to K would time a codec
// fed the same rows twice, not the K/V pair the issue describes.
TEST(BenchRunner, KeysAndValuesDiffer) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 1;
  CaseRunner runner(f.target(), s);
  ASSERT_TRUE(runner.run({1, 64, 16, 16, 0}).error.empty());
  ASSERT_EQ(f.writer->contents.size(), 1u);
  const std::string& set = *f.writer->contents.begin();  // K, then V, then the slots
  const std::size_t row_bytes = 16 * 64 * 2;
  EXPECT_NE(set.substr(0, row_bytes), set.substr(row_bytes, row_bytes));
}

// --fused-qkv: K and V are views of one [T, (Q + 2H) x D] buffer a set, K's heads after the Q
// query heads and V's after K's, as an engine's fused QKV projection leaves them; the bytes
// counted stay the write's own (no query row is read).
TEST(BenchRunner, FusedQkvViewsStepThroughOneBufferASet) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 3;
  const CaseResult apart = CaseRunner(f.target(), s).run({2, 64, 16, 16, 0});
  ASSERT_TRUE(apart.error.empty()) << apart.error;
  EXPECT_EQ(f.writer->key_views[0].stride(0), 2 * 64);
  s.fused_qkv_query_heads = 4;
  const CaseResult fused = CaseRunner(f.target(), s).run({2, 64, 16, 16, 0});
  ASSERT_TRUE(fused.error.empty()) << fused.error;
  EXPECT_EQ(fused.write->bytes.total(), apart.write->bytes.total());
  // As many sets: rotated by the rows a write touches, not by the query heads it never reads.
  EXPECT_EQ(fused.write->sets, apart.write->sets);
  EXPECT_GT(fused.write->sets, 2);

  const int64_t token_elements = (4 + 2 * 2) * 64;
  const auto& keys = f.writer->key_views;
  const auto& values = f.writer->value_views;
  ASSERT_EQ(keys.size(), values.size());
  ASSERT_GE(keys.size(), 2u);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (const TensorView* v : {&keys[i], &values[i]}) {
      EXPECT_EQ(v->stride(0), token_elements);
      EXPECT_EQ(v->stride(1), 64);
      EXPECT_EQ(v->stride(2), 1);
    }
    // V's heads right after K's in each token's row.
    EXPECT_EQ(static_cast<char*>(values[i].data) - static_cast<char*>(keys[i].data), 2 * 64 * 2);
  }
  // Consecutive launches take consecutive sets, 16 tokens x token_elements bf16 apart.
  const auto first = static_cast<char*>(keys[0].data), second = static_cast<char*>(keys[1].data);
  EXPECT_EQ(std::abs(second - first), 16 * token_elements * 2);
}

TEST(BenchRunner, AFailingCaseIsReportedNotThrown) {
  Fakes f;
  CaseRunner runner(f.target(), small_settings());
  const CaseResult r = runner.run({8, 100, 16, 16, 0});  // head_size 100: no layout for it
  EXPECT_FALSE(r.error.empty());
  EXPECT_FALSE(r.write);
  const std::string line = progress_line(2, 10, r, 1e12);
  EXPECT_EQ(line.rfind("[ 3/10] H=8 D=100 bs=16 T=16: FAILED: ", 0), 0u) << line;
}

// A case whose host inputs cannot be allocated (std::bad_alloc anywhere in it) says so, with its
// shape, and the sweep goes on.
TEST(BenchRunner, ACaseOutOfHostMemoryIsReported) {
  Fakes f;
  Target t = f.target();
  t.make_writer = [](const BackendOptions&) -> std::shared_ptr<KVCacheWriter> {
    throw std::bad_alloc();
  };
  CaseRunner runner(t, small_settings());
  const CaseResult r = runner.run({8, 128, 16, 64, 0});
  EXPECT_EQ(r.error, "out of host memory for T=64 H=8 D=128 (its inputs, slots and pages)");
  EXPECT_FALSE(r.write);
}

// A case whose sizes pass 64 bits fails before any buffer is asked for: T x H x D = 2^62 rows of
// f32 are 2^64 bytes, which wrapped to 0 and sized the reader's outputs as nothing. Its layout,
// 4 pages of 2^60 + 2^57 bytes, fits.
TEST(BenchRunner, ACaseTooLargeForSixtyFourBitSizesFailsBeforeAllocating) {
  Fakes f;
  CaseRunner runner(f.target(), small_settings());
  f.runtime.fail_allocate = true;  // a buffer asked for fails the case with another message
  const CaseResult r = runner.run({1, int64_t{1} << 58, 4, 16, 0});
  EXPECT_EQ(r.error,
            "one page of block_size 4 x num_kv_heads 1 x head_size 288230376151711744 needs 2^32 "
            "bytes or more (pages use 32-bit offsets)");
  EXPECT_FALSE(r.write);
}

TEST(BenchReport, JsonKeepsEveryNumber) {
  Fakes f;
  Settings s = small_settings();
  s.iterations = 4;
  CaseRunner runner(f.target(), s);
  std::vector<CaseResult> results{runner.run({8, 128, 16, 64, 2}), runner.run({8, 100, 16, 1, 0})};
  RunInfo info;
  info.date = "2026-12-02T00:00:00Z";
  info.backend = "fake";
  info.device_name = "fake";
  info.copy_bytes = 1 << 20;
  info.copy_bytes_per_s = 4e12;
  info.settings = s;
  const nlohmann::json j = to_json(info, results);
  for (const char* key : {"date", "config", "device", "copy_bandwidth", "settings", "cases"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(j["copy_bandwidth"]["gbps"].get<double>(), 4000.0);
  EXPECT_EQ(j["complete"], true);
  EXPECT_EQ(to_json(info, results, false)["complete"], false) << "rewritten after each case";
  const auto& c = j["cases"][0];
  EXPECT_EQ(c["shape"]["num_kv_heads"], 8);
  EXPECT_EQ(c["shape"]["head_size"], 128);
  EXPECT_EQ(c["block_size"], 16);
  EXPECT_EQ(c["tokens"], 64);
  EXPECT_EQ(c["threads"], 2);
  EXPECT_TRUE(c["error"].is_null());
  const auto& w = c["write"];
  EXPECT_DOUBLE_EQ(w["ms"]["median"].get<double>(), 2.0);
  EXPECT_EQ(w["samples_ms"].size(), 4u);
  const double gbps = static_cast<double>(w["bytes"]["total"].get<uint64_t>()) / 2e-3 / 1e9;
  EXPECT_DOUBLE_EQ(w["gbps"].get<double>(), gbps);
  EXPECT_DOUBLE_EQ(w["percent_of_copy"].get<double>(), gbps / 4000.0 * 100);
  EXPECT_DOUBLE_EQ(w["graph"]["ms"]["median"].get<double>(), 1.0);
  // The same bytes copied (the fake runtime says 1e12 B/s for any size).
  EXPECT_DOUBLE_EQ(w["same_size_copy"]["gbps"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(w["same_size_copy"]["percent_of_copy"].get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(w["same_size_copy"]["measured_percent_of_it"].get<double>(),
                   gbps / 1000.0 * 100);
  ASSERT_FALSE(f.runtime.copied.empty());
  EXPECT_EQ(f.runtime.copied.front(), w["bytes"]["total"].get<uint64_t>() / 2);  // a copy moves 2x
  EXPECT_TRUE(c["read"].is_object());
  EXPECT_FALSE(j["cases"][1]["error"].is_null());
  EXPECT_TRUE(j["cases"][1]["write"].is_null());
}

}  // namespace
}  // namespace kvq::app::bench
