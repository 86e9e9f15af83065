// SequenceScheduler: block tables, slot mappings with padding, admission into freed blocks, and
// the accounting the demo reports as blocks_leaked.
#include "sequence_scheduler.h"

#include <gtest/gtest.h>

#include <set>

#include "kvq/core/status.h"

namespace kvq::demo {
namespace {

// Runs the schedule the way kvq-demo does and checks the invariants after every write.
struct Trace {
  std::vector<int64_t> admitted;  // in order
  std::vector<int64_t> finished;  // in order
  int64_t tokens = 0, padding = 0, decode_writes = 0;
  std::set<int64_t> slots_written;
};

Trace drive(SequenceScheduler& s) {
  Trace tr;
  auto retire = [&] {
    for (int64_t id : s.complete()) {
      s.release(id);
      tr.finished.push_back(id);
    }
    EXPECT_EQ(s.blocks_leaked(), 0);
  };
  while (!s.done()) {
    const auto prefills = s.admit();
    for (const auto& w : prefills) {
      tr.admitted.push_back(w.sequence);
      EXPECT_EQ(static_cast<int64_t>(w.slots.size()), s.sequence(w.sequence).plan.prompt_tokens);
      tr.tokens += static_cast<int64_t>(w.slots.size());
      for (int64_t slot : w.slots) EXPECT_GE(slot, 0);
    }
    retire();
    if (s.done()) break;
    if (!s.has_decode_work()) {
      EXPECT_FALSE(prefills.empty()) << "stuck";
      if (prefills.empty()) break;
      continue;
    }
    const DecodeWrite w = s.decode();
    ++tr.decode_writes;
    EXPECT_EQ(static_cast<int64_t>(w.slots.size()), s.max_batch());
    for (std::size_t r = 0; r < w.slots.size(); ++r) {
      EXPECT_EQ(w.slots[r] < 0, w.sequence[r] < 0);
      if (w.sequence[r] < 0) ++tr.padding;
    }
    tr.tokens += w.tokens;
    retire();
  }
  return tr;
}

TEST(SequenceScheduler, SlotsComeFromTheBlockTable) {
  // One sequence: prompt 5, decode 4, block_size 4 -> blocks 0, 1, then 2 for token 8.
  SequenceScheduler s({{5, 4}}, 2, 8, 4);
  const auto prefills = s.admit();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].slots, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.sequence(0).block_table, (std::vector<int64_t>{0, 1}));
  std::vector<int64_t> decode_slots;
  while (s.has_decode_work()) {
    const DecodeWrite w = s.decode();
    ASSERT_EQ(w.slots.size(), 2u);
    EXPECT_EQ(w.slots[1], -1);  // the batch's second row is a hole
    EXPECT_EQ(w.sequence[1], -1);
    EXPECT_EQ(w.tokens, 1);
    decode_slots.push_back(w.slots[0]);
  }
  EXPECT_EQ(decode_slots, (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(s.sequence(0).block_table, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(s.slots_of(0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s.complete(), (std::vector<int64_t>{0}));
  EXPECT_EQ(s.blocks_leaked(), 0);
  s.release(0);
  EXPECT_EQ(s.allocator().num_used(), 0);
  EXPECT_TRUE(s.done());
  EXPECT_THROW(s.release(0), Error);  // no double release
}

TEST(SequenceScheduler, NewSequencesLandInFreedBlocks) {
  // 3 sequences, batch 1: each one runs alone and reuses the blocks of the one before.
  SequenceScheduler s({{8, 0}, {6, 2}, {4, 0}}, 1, 2, 4);
  auto p = s.admit();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(s.sequence(0).block_table, (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(s.admit().empty());  // no free row
  s.release(0);
  p = s.admit();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].sequence, 1);
  EXPECT_EQ(s.sequence(1).block_table, (std::vector<int64_t>{1, 0}));  // freed last, first out
  EXPECT_EQ(p[0].slots, (std::vector<int64_t>{4, 5, 6, 7, 0, 1}));
  EXPECT_EQ(s.decode().slots, (std::vector<int64_t>{2}));
  EXPECT_EQ(s.decode().slots, (std::vector<int64_t>{3}));
  EXPECT_EQ(s.allocator().reused(), 2);
  s.release(1);
  p = s.admit();
  ASSERT_EQ(p.size(), 1u);
  s.release(2);
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.blocks_leaked(), 0);
}

TEST(SequenceScheduler, AdmissionReservesBlocksForGrowth) {
  // 4 blocks of 4 tokens. Sequence 0 will grow to 12 tokens (3 blocks); sequence 1 needs 2
  // blocks at full length, so it must wait although its prompt alone (1 block) would fit now.
  SequenceScheduler s({{4, 8}, {4, 4}}, 2, 4, 4);
  auto p = s.admit();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(s.allocator().num_used(), 1);
  while (s.has_decode_work()) s.decode();
  EXPECT_EQ(s.allocator().num_used(), 3);  // growth never ran out
  EXPECT_TRUE(s.admit().empty());          // 1 free block < 2 needed
  s.release(0);
  EXPECT_EQ(s.admit().size(), 1u);
}

TEST(SequenceScheduler, AWholeRunFreesEverythingButTheLiveSequences) {
  DemoSpec spec;
  spec.sequences = 20;
  spec.max_batch = 4;
  spec.prompt_tokens = {3, 40};
  spec.decode_tokens = {0, 30};
  auto plans = plan_sequences(spec, 7);
  SequenceScheduler s(plans, spec.max_batch, 24, 8);
  const Trace tr = drive(s);
  EXPECT_EQ(tr.admitted.size(), 20u);
  for (std::size_t i = 0; i < tr.admitted.size(); ++i) {
    EXPECT_EQ(tr.admitted[i], static_cast<int64_t>(i));
  }
  // The run stops when the last sequence finishes; the others still running are live.
  ASSERT_FALSE(tr.finished.empty());
  EXPECT_EQ(tr.finished.back(), 19);
  int64_t live_blocks = 0, live_tokens = 0, finished_tokens = 0;
  for (int64_t id : s.running()) {
    live_blocks += static_cast<int64_t>(s.sequence(id).block_table.size());
    live_tokens += s.sequence(id).length;
  }
  for (int64_t id : tr.finished) finished_tokens += s.sequence(id).plan.total();
  EXPECT_EQ(s.allocator().num_used(), live_blocks);
  EXPECT_EQ(tr.tokens, live_tokens + finished_tokens);
  EXPECT_EQ(s.blocks_leaked(), 0);
  EXPECT_GT(s.allocator().reused(), 0);
  EXPECT_GT(tr.padding, 0);  // holes appear once the queue runs dry
  EXPECT_LE(s.allocator().peak_used(), 24);
}

TEST(SequenceScheduler, DifferentLengthsFinishAtDifferentSteps) {
  DemoSpec spec;
  spec.sequences = 12;
  spec.prompt_tokens = {16, 128};
  spec.decode_tokens = {4, 64};
  const auto a = plan_sequences(spec, 1234);
  const auto b = plan_sequences(spec, 1234);
  const auto c = plan_sequences(spec, 1235);
  std::set<int64_t> totals;
  bool same = true, differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(a[i].prompt_tokens, 16);
    EXPECT_LE(a[i].prompt_tokens, 128);
    EXPECT_GE(a[i].decode_tokens, 4);
    EXPECT_LE(a[i].decode_tokens, 64);
    totals.insert(a[i].decode_tokens);
    same = same && a[i].prompt_tokens == b[i].prompt_tokens &&
           a[i].decode_tokens == b[i].decode_tokens;
    differs = differs || a[i].prompt_tokens != c[i].prompt_tokens;
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(differs);
  EXPECT_GT(totals.size(), 6u);
}

TEST(MisownedBlocks, CountsLeaksSharingAndUseAfterFree) {
  BlockAllocator a(6);
  for (int i = 0; i < 4; ++i) a.allocate();  // 0..3 in use
  Sequence x;
  x.state = SequenceState::running;
  x.length = 5;  // 2 blocks of 4
  x.block_table = {0, 1};
  Sequence y = x;
  y.block_table = {2, 3};
  EXPECT_EQ(misowned_blocks(a, {x, y}, 4), 0);
  EXPECT_EQ(misowned_blocks(a, {x}, 4), 2);  // 2 and 3 leaked
  y.block_table = {2, 1};
  EXPECT_EQ(misowned_blocks(a, {x, y}, 4), 2);  // 1 owned twice, 3 leaked
  y.block_table = {2, 3};
  a.release(3);
  EXPECT_EQ(misowned_blocks(a, {x, y}, 4), 1);  // 3 owned but free
  y.block_table = {2};
  EXPECT_EQ(misowned_blocks(a, {x, y}, 4), 1);  // y's 5 tokens need 2 blocks
  Sequence done = x;
  done.state = SequenceState::finished;
  done.block_table = {};
  EXPECT_EQ(misowned_blocks(a, {x, done}, 4), 1);  // 2 leaked: nobody owns it
  done.block_table = {2};
  EXPECT_EQ(misowned_blocks(a, {x, done}, 4), 1);  // a finished sequence must own nothing
}

TEST(SequenceScheduler, RefusesASequenceThatCannotFitAlone) {
  try {
    SequenceScheduler s({{30, 10}}, 1, 4, 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "scheduler: sequence 0 needs 5 blocks for 40 tokens, the cache has 4");
  }
  EXPECT_THROW(SequenceScheduler({{0, 1}}, 1, 4, 8), Error);
  EXPECT_THROW(SequenceScheduler({{1, 1}}, 0, 4, 8), Error);
}

}  // namespace
}  // namespace kvq::demo
