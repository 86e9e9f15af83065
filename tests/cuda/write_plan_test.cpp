// The host path of a cuda write or read: the contract (kvq/core/contract.h) against the
// backend's requirements, then the kernel descriptor (write_plan.cpp): every refusal with its
// exact message, and the descriptor a valid write produces. No GPU: pointers are never
// dereferenced here.
#include "write_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvq/core/contract.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/scale_rule.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq::cuda {
namespace {

constexpr Device kDev = Device::cuda(0);

// Fake, well-aligned device addresses.
void* addr(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

class WritePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.num_blocks = 10;
    spec_.block_size = 16;
    spec_.num_kv_heads = 8;
    spec_.head_size = 128;
    layout_ = std::make_unique<PageLayout>(PageLayout::from_spec(spec_));
    ASSERT_TRUE(make_page_addressing(layout_->descriptor(), &addressing_).is_ok());
    args_ = WriteArgs{};
    args_.key = make_view(addr(0x10000), DType::bf16, {5, 8, 128}, kDev);
    args_.value = make_view(addr(0x20000), DType::bf16, {5, 8, 128}, kDev);
    args_.slot_mapping = make_view(addr(0x30000), DType::i64, {5}, kDev);
    args_.cache = make_view(addr(0x40000), DType::u8,
                            {10, static_cast<int64_t>(layout_->page_bytes())}, kDev);
  }
  Status plan() {
    if (Status st = check_write_args(args_, *layout_, write_requirements(0), "cuda"); !st)
      return st;
    return plan_write(args_, layout_->descriptor(), addressing_, bars_, &desc_, &input_);
  }
  // The host path of a read: the contract, then the descriptor.
  Status read_plan(const ReadArgs& r, ReadKernelDesc* d) {
    if (Status st = check_read_args(r, *layout_, read_requirements(0), "cuda"); !st) return st;
    return plan_read(r, layout_->descriptor(), addressing_, d);
  }
  // A valid read of the write's slots from its cache, into outputs of their own.
  ReadArgs read_args() const {
    ReadArgs r;
    r.cache = args_.cache;
    r.slot_mapping = args_.slot_mapping;
    r.key = make_view(addr(0x100000), DType::f32, {5, 8, 128}, kDev);
    r.value = make_view(addr(0x180000), DType::f32, {5, 8, 128}, kDev);
    return r;
  }

  CacheSpec spec_;
  std::unique_ptr<PageLayout> layout_;
  PageAddressing addressing_{};
  WriteArgs args_;
  WriteKernelDesc desc_{};
  // The H200's: pairs from 2 x 2 x 132 SMs x 4 blocks x 256, one side a thread up to
  // 132 SMs x 256, streaming loads up to 132 SMs x 5 blocks x 256 (one wave), the early trigger
  // up to 132 SMs x 256 / 2.
  WriteSizeBars bars_{540672, 33792, 168960, 16896};
  InputType input_{};
};

TEST_F(WritePlanTest, ValidWriteFillsTheDescriptor) {
  args_.k_scale = 0.5f;
  args_.v_scale = 3.0f;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(input_, InputType::bf16);
  EXPECT_EQ(desc_.src[0], args_.key.data);
  EXPECT_EQ(desc_.src[1], args_.value.data);
  EXPECT_EQ(desc_.token_stride[0], 8 * 128);
  EXPECT_EQ(desc_.head_stride[1], 128);
  EXPECT_EQ(desc_.slots_are_i64, 1);
  EXPECT_EQ(desc_.page.items, 5u * 8 * 8);
  EXPECT_EQ(desc_.page.num_slots, 160);
  EXPECT_EQ(desc_.groups_per_thread, 1);  // 320 items: under bars_.pair_min_items
  EXPECT_EQ(desc_.sides_per_thread, 1);   // and under bars_.split_max_items
  EXPECT_EQ(desc_.streaming_loads, 1);    // and under bars_.stream_max_items
  EXPECT_EQ(desc_.early_trigger, 1);      // and under bars_.early_max_items
  EXPECT_EQ(desc_.page.data_access_bytes, 8);
  EXPECT_EQ(desc_.global_scale[0], 2.0f);
  EXPECT_EQ(desc_.inv_global_scale[0], 0.5f);
  EXPECT_EQ(desc_.global_scale[1], 1.0f / 3.0f);
  EXPECT_EQ(desc_.inv_global_scale[1], 1.0f / (1.0f / 3.0f));
  EXPECT_EQ(desc_.scale_ptr[0], nullptr);
  EXPECT_EQ(desc_.fast_reciprocal[0], 1);
  EXPECT_EQ(desc_.fast_reciprocal[1], 1);
}

// Step 4's divisor sf / global must stay normal and below 2^126 for the in-window reciprocal:
// scales whose products leave that window take __frcp_rn's checked path; device scales are
// checked by the kernel.
TEST_F(WritePlanTest, FastReciprocalOnlyWhereEveryDivisorIsInTheWindow) {
  EXPECT_TRUE(reciprocal_window_holds(1.0f));
  EXPECT_TRUE(reciprocal_window_holds(0x1p-117f));          // 2^-9 x 2^-117 = 2^-126: the low edge
  EXPECT_FALSE(reciprocal_window_holds(0x1.fffffcp-118f));  // (0x1.fffffep-118 rounds up to it)
  EXPECT_TRUE(reciprocal_window_holds(0x1.249248p117f));    // x 448 just below 2^126
  EXPECT_FALSE(reciprocal_window_holds(0x1.24924ap117f));
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_FALSE(reciprocal_window_holds(bad)) << bad;
  }
  args_.k_scale = 3e-38f;  // inv_global = k_scale: 2^-9 of it is below 2^-126
  args_.v_scale = 2.0f;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.fast_reciprocal[0], 0);
  EXPECT_EQ(desc_.fast_reciprocal[1], 1);
  args_.k_scale = 1.0f;
  args_.v_scale = 1e36f;  // 448 of it is above 2^126
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.fast_reciprocal[0], 1);
  EXPECT_EQ(desc_.fast_reciprocal[1], 0);
  args_.v_scale_ptr = static_cast<const float*>(addr(0x80000));
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.fast_reciprocal[1], 1);  // the kernel checks a device scale
}

// The writer's item order: every (token, head, group) exactly once; token runs (a warp's items
// consecutive tokens of one head, whose page bytes sit together) only for two groups a thread in
// HND pages with at least as many heads as a warp has rows and rows shorter than a line; the
// reader's order everywhere else.
TEST_F(WritePlanTest, WriterItemOrderIsABijectionWithAWarpOnOneHead) {
  struct Case {
    int64_t heads, head_size;
    const char* order;
    int64_t tokens;
    bool pairs;  // two groups a thread
    uint32_t run_log2;
  };
  for (const Case& c : {Case{8, 128, "HND", 37, true, 3}, Case{32, 128, "HND", 1000, true, 3},
                        Case{16, 64, "HND", 21, true, 4}, Case{8, 128, "HND", 37, false, 0},
                        Case{4, 128, "HND", 37, true, 0}, Case{8, 64, "HND", 100, true, 0},
                        Case{8, 256, "HND", 6, true, 0}, Case{8, 128, "NHD", 37, true, 0},
                        Case{1, 128, "HND", 9, true, 0}, Case{2, 80, "HND", 11, false, 0}}) {
    SCOPED_TRACE(std::to_string(c.heads) + "x" + std::to_string(c.head_size) + " " + c.order +
                 " T=" + std::to_string(c.tokens) + (c.pairs ? " G=2" : " G=1"));
    spec_.num_kv_heads = c.heads;
    spec_.head_size = c.head_size;
    spec_.num_blocks = 64;
    spec_.layout.order = c.order;
    spec_.layout.v_scales = c.head_size % 64 == 0 ? "sm100_swizzled" : "linear";
    layout_ = std::make_unique<PageLayout>(PageLayout::from_spec(spec_));
    ASSERT_TRUE(make_page_addressing(layout_->descriptor(), &addressing_).is_ok());
    args_.key = make_view(addr(0x100000), DType::bf16, {c.tokens, c.heads, c.head_size}, kDev);
    args_.value = make_view(addr(0x900000), DType::bf16, {c.tokens, c.heads, c.head_size}, kDev);
    args_.slot_mapping = make_view(addr(0x30000), DType::i64, {c.tokens}, kDev);
    args_.cache = make_view(addr(0x4000000), DType::u8,
                            {64, static_cast<int64_t>(layout_->page_bytes())}, kDev);
    bars_.pair_min_items = c.pairs ? 0 : ~uint64_t{0};
    ASSERT_TRUE(plan().is_ok());
    ASSERT_EQ(desc_.groups_per_thread, c.pairs ? 2 : 1);
    EXPECT_EQ(desc_.run_log2, c.run_log2);
    const uint32_t run = 1u << c.run_log2;
    EXPECT_EQ(desc_.run_tokens, c.run_log2 == 0 ? 0u : static_cast<uint32_t>(c.tokens) / run * run);

    const int64_t S = c.head_size / 16;
    std::vector<int> seen(static_cast<size_t>(c.tokens * c.heads * S), 0);
    const uint32_t warp_items = 32u * static_cast<uint32_t>(desc_.groups_per_thread);
    for (uint32_t item = 0; item < desc_.page.items; ++item) {
      const ItemIndex ix = split_write_item(desc_, item);
      ASSERT_LT(ix.token, c.tokens);
      ASSERT_LT(ix.head, c.heads);
      ASSERT_LT(ix.group, S);
      ++seen[static_cast<size_t>((ix.token * c.heads + ix.head) * S + ix.group)];
      // Within a run, a warp stays on its first item's head and on tokens run-aligned with it.
      const ItemIndex first = split_write_item(desc_, item / warp_items * warp_items);
      if (c.run_log2 > 0 && first.token < desc_.run_tokens) {
        ASSERT_EQ(ix.head, first.head) << "item " << item;
        ASSERT_EQ(ix.token >> c.run_log2, first.token >> c.run_log2) << "item " << item;
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "row-group " << i;
  }
}

// A block's bulk prefetches (write_kernel.cu, prefetch_block_inputs) ask for exactly its inputs:
// one run a side where every block of the one-group grid of several waves reads consecutive
// groups (kBlockRun), else one run a side for each token it touches where a token's heads are
// back to back (kTokenRuns: block_token_run's runs, checked against the items' addresses), else
// nothing; and never in the other mappings. Brute force over every block, of 128 threads where
// the tokens are back to back and 64 elsewhere; and the slot lines each block asks for.
TEST_F(WritePlanTest, BlockPrefetchAsksForExactlyEachBlocksInputs) {
  struct Case {
    int64_t heads, head_size, tokens;
    int64_t token_stride, head_stride;  // in elements; 0: dense
  };
  int counts[3] = {0, 0, 0};  // cases with each BlockPrefetch
  int slot_blocks_checked = 0;
  for (const Case& c :
       {Case{8, 128, 37, 0, 0}, Case{8, 128, 37, 8 * 128 + 64, 0}, Case{8, 128, 37, 0, 144},
        Case{1, 128, 100, 0, 0}, Case{1, 128, 100, 256, 0}, Case{1, 128, 100, 128, 4096},
        Case{4, 128, 50, 0, 0}, Case{4, 128, 50, 4 * 128 + 8, 0}, Case{16, 64, 20, 16 * 64 + 32, 0},
        Case{2, 80, 70, 0, 0}, Case{2, 80, 70, 168, 0}, Case{1, 16, 150, 24, 0},
        Case{3, 32, 90, 3 * 32 + 16, 0}, Case{4, 64, 40, 4 * 64 + 32, 96}}) {
    const int64_t head_stride = c.head_stride != 0 ? c.head_stride : c.head_size;
    const int64_t token_stride = c.token_stride != 0 ? c.token_stride : c.heads * head_stride;
    SCOPED_TRACE(std::to_string(c.heads) + "x" + std::to_string(c.head_size) + " strides " +
                 std::to_string(token_stride) + ", " + std::to_string(head_stride));
    spec_.num_kv_heads = c.heads;
    spec_.head_size = c.head_size;
    spec_.num_blocks = 64;
    spec_.layout.v_scales = c.head_size % 64 == 0 ? "sm100_swizzled" : "linear";
    layout_ = std::make_unique<PageLayout>(PageLayout::from_spec(spec_));
    ASSERT_TRUE(make_page_addressing(layout_->descriptor(), &addressing_).is_ok());
    uintptr_t base = 0x100000;
    for (TensorView* t : {&args_.key, &args_.value}) {
      *t = make_view(addr(base), DType::bf16, {c.tokens, c.heads, c.head_size}, kDev);
      t->strides[0] = token_stride;
      t->strides[1] = head_stride;
      base += 0x800000;
    }
    args_.slot_mapping = make_view(addr(0x30000), DType::i64, {c.tokens}, kDev);
    args_.cache = make_view(addr(0x4000000), DType::u8,
                            {64, static_cast<int64_t>(layout_->page_bytes())}, kDev);
    bars_ = {~uint64_t{0}, 0, 0};  // one group, both sides, the read-only path
    ASSERT_TRUE(plan().is_ok());
    ASSERT_EQ(desc_.groups_per_thread, 1);
    ASSERT_EQ(desc_.sides_per_thread, 2);
    ASSERT_EQ(desc_.streaming_loads, 0);
    const bool dense =
        token_stride == c.heads * c.head_size && (c.heads == 1 || head_stride == c.head_size);
    const uint32_t block = wave_block_threads(desc_);
    ASSERT_EQ(block, dense ? kDenseWaveBlockThreads : kWaveBlockThreads);

    // Each item's first input element; whether every block's items, and every block's part of
    // each token, are consecutive groups.
    const uint32_t items = desc_.page.items;
    const auto row = static_cast<uint32_t>(c.heads * (c.head_size / 16));  // items a token
    std::vector<int64_t> at(items);
    for (uint32_t item = 0; item < items; ++item) {
      const ItemIndex ix = split_item(desc_.page, item);
      at[item] = ix.token * token_stride + ix.head * head_stride + ix.group * 16;
    }
    bool block_runs = true, token_runs = true;
    for (uint32_t item = 1; item < items; ++item) {
      if (item % block == 0 || at[item] == at[item - 1] + 16) continue;
      block_runs = false;
      token_runs = token_runs && item % row == 0;  // a break only where a token starts
    }
    const BlockPrefetch expected = block_runs   ? kBlockRun
                                   : token_runs ? kTokenRuns
                                                : kNoBlockPrefetch;
    ASSERT_EQ(desc_.block_prefetch, expected);
    ++counts[expected];

    // Threads 0 and 1 ask for the slot lines of the block's first and last tokens
    // (block_edge_token): tokens of this write, whose two lines hold every int64 slot of a block
    // of up to 17 tokens wherever the (8-byte aligned) slot mapping starts in a line.
    for (uint32_t begin = 0; begin < items; begin += block) {
      const uint32_t end = std::min(begin + block, items);
      const uint32_t first = block_edge_token(desc_.page, begin, end, 0);
      const uint32_t last = block_edge_token(desc_.page, begin, end, 1);
      ASSERT_EQ(first, split_item(desc_.page, begin).token) << "block at item " << begin;
      ASSERT_EQ(last, split_item(desc_.page, end - 1).token) << "block at item " << begin;
      ASSERT_LT(last, static_cast<uint32_t>(c.tokens));
      if (last - first > 16) continue;  // 1x16: 64 or 128 tokens a block
      ++slot_blocks_checked;
      for (uint32_t start = 0; start < 128; start += 8) {  // the slots' first byte in a line
        const auto line = [&](uint32_t token) { return (start + 8 * token) / 128; };
        for (uint32_t item = begin; item < end; ++item) {
          const uint32_t at_line = line(split_item(desc_.page, item).token);
          ASSERT_TRUE(at_line == line(first) || at_line == line(last))
              << "block at item " << begin << ", item " << item << ", slots at line offset "
              << start;
        }
      }
    }

    if (expected == kTokenRuns) {  // the runs of each block cover its items, once, in order
      for (uint32_t begin = 0; begin < items; begin += block) {
        const uint32_t end = std::min(begin + block, items);
        uint32_t next = begin;  // the first item no run has covered yet
        for (uint32_t j = 0; j < block; ++j) {
          const TokenRun run = block_token_run(desc_.page, begin, end, j);
          if (run.items == 0) continue;
          const uint32_t first = run.token * row + run.offset;
          ASSERT_EQ(first, next) << "block at item " << begin << ", run " << j;
          ASSERT_EQ(at[first], run.token * token_stride + run.offset * 16);
          for (uint32_t k = 1; k < run.items; ++k) ASSERT_EQ(at[first + k], at[first] + 16 * k);
          next = first + run.items;
        }
        ASSERT_EQ(next, end) << "block at item " << begin;
      }
    }

    bars_ = {~uint64_t{0}, 0, desc_.page.items};  // one wave: the streaming kernel's prefetch
    ASSERT_TRUE(plan().is_ok());
    EXPECT_EQ(desc_.block_prefetch, kNoBlockPrefetch);
    bars_ = {~uint64_t{0}, desc_.page.items, 0};  // one side a thread
    ASSERT_TRUE(plan().is_ok());
    EXPECT_EQ(desc_.block_prefetch, kNoBlockPrefetch);
    if (c.head_size % 32 == 0) {
      bars_ = {0, 0, 0};  // two groups a thread: blocks of 64 whatever the strides
      ASSERT_TRUE(plan().is_ok());
      EXPECT_EQ(desc_.block_prefetch, kNoBlockPrefetch);
      EXPECT_EQ(wave_block_threads(desc_), kWaveBlockThreads);
    }
  }
  // runs: the dense cases, 8x128 and 16x64 with padded tokens (a block is one token), one head of
  // any head stride; token runs: the other padded tokens with heads back to back; nothing: heads
  // apart
  EXPECT_EQ(counts[kBlockRun], 7);
  EXPECT_EQ(counts[kTokenRuns], 5);
  EXPECT_EQ(counts[kNoBlockPrefetch], 2);
  EXPECT_GT(slot_blocks_checked, 100);
}

TEST_F(WritePlanTest, EveryFieldIsFilledWhateverTheDescriptorHeldBefore) {
  // plan_write fills the descriptor in place (no zeroing pass): a reused descriptor must come out
  // byte for byte as a fresh one.
  args_.k_scale_ptr = static_cast<const float*>(addr(0x80000));
  WriteKernelDesc fresh{};
  std::memset(static_cast<void*>(&desc_), 0xAB, sizeof desc_);
  ASSERT_TRUE(plan().is_ok());
  ASSERT_TRUE(
      plan_write(args_, layout_->descriptor(), addressing_, bars_, &fresh, &input_).is_ok());
  EXPECT_EQ(std::memcmp(&desc_, &fresh, sizeof fresh), 0);
  EXPECT_EQ(desc_.global_scale[0], 0.0f);
  EXPECT_EQ(desc_.counters, nullptr);
  EXPECT_EQ(desc_.use_hw_e2m1, 0);
  ReadArgs r = read_args();
  ReadKernelDesc reused, fresh_read{};
  std::memset(static_cast<void*>(&reused), 0xAB, sizeof reused);
  ASSERT_TRUE(read_plan(r, &reused).is_ok());
  ASSERT_TRUE(read_plan(r, &fresh_read).is_ok());
  EXPECT_EQ(std::memcmp(&reused, &fresh_read, sizeof reused), 0);
}

TEST_F(WritePlanTest, FusedQkvViewIsAccepted) {
  // qkv [5, (16 + 8 + 8) * 128]: key = qkv[:, 16*128 : 24*128] viewed [5, 8, 128].
  args_.key.data = static_cast<char*>(args_.key.data) + 16 * 128 * 2;
  args_.key.strides = {32 * 128, 128, 1, 0};
  args_.value.strides = {32 * 128, 128, 1, 0};
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.token_stride[0], 32 * 128);
}

TEST_F(WritePlanTest, DeviceScalePointersSkipTheHostScaleCheck) {
  args_.k_scale = -1.0f;  // ignored
  args_.k_scale_ptr = static_cast<const float*>(addr(0x80000));
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.scale_ptr[0], args_.k_scale_ptr);
  args_.v_scale_ptr = static_cast<const float*>(addr(0x80002));
  const Status s = plan();
  EXPECT_EQ(s.message(),
            "*v_scale_ptr: data pointer 0x80002 is not aligned to its 4-byte elements");
}

TEST_F(WritePlanTest, Refusals) {
  struct Case {
    std::function<void(WriteArgs&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](WriteArgs& a) { a.key.device = Device::cpu(); },
       "key: [5, 8, 128] bf16 cpu: expected cuda:0 memory (the writer's device)"},
      {[](WriteArgs& a) { a.slot_mapping.device = Device::cuda(1); },
       "slot_mapping: [5] i64 cuda:1: expected cuda:0 memory (the writer's device)"},
      {[](WriteArgs& a) {
         a.key = make_view(a.key.data, DType::bf16, {5, 4, 128}, kDev);
       },
       "key.shape[1] = 4: expected 8 (num_kv_heads)"},
      {[](WriteArgs& a) {
         a.value = make_view(a.value.data, DType::bf16, {6, 8, 128}, kDev);
       },
       "value.shape[0] = 6: expected 5 (num_tokens of key)"},
      {[](WriteArgs& a) { a.key.dtype = DType::i32; },
       "key: dtype i32: expected bf16, f16 or f32 (cuda's input dtypes)"},
      {[](WriteArgs& a) { a.value.dtype = DType::f16; },
       "value: dtype f16: expected bf16 (the dtype of key)"},
      {[](WriteArgs& a) { a.slot_mapping.dtype = DType::f32; },
       "slot_mapping: dtype f32: expected i64 or i32"},
      {[](WriteArgs& a) { a.slot_mapping = make_view(a.slot_mapping.data, DType::i64, {4}, kDev); },
       "slot_mapping.shape[0] = 4: expected 5 (num_tokens of key)"},
      {[](WriteArgs& a) { a.slot_mapping.strides[0] = 2; },
       "slot_mapping: stride(0) = 2: expected a contiguous tensor (stride 1)"},
      {[](WriteArgs& a) { a.cache.dtype = DType::i32; }, "cache: dtype i32: expected u8"},
      {[](WriteArgs& a) {
         a.cache = make_view(a.cache.data, DType::u8, {9, 2}, kDev);
       },
       "cache: shape [9, 2]: expected [10, 18432] (num_blocks x page_bytes; the buffer is too "
       "small)"},
      {[](WriteArgs& a) { a.k_scale = 0.0f; }, "k_scale = 0: " + std::string(kScaleRule)},
      {[](WriteArgs& a) { a.v_scale = std::numeric_limits<float>::infinity(); },
       "v_scale = inf: " + std::string(kScaleRule)},
      {[](WriteArgs& a) { a.v_scale = std::nanf(""); },
       "v_scale = nan: " + std::string(kScaleRule)},
      {[](WriteArgs& a) { a.k_scale = 1e-40f; },  // 1 / k_scale is infinite
       "k_scale = 1e-40: " + std::string(kScaleRule)},
      {[](WriteArgs& a) {
         a.key.strides = {1024, 128, 2, 0};
       },
       "key: stride(2) = 2: cuda needs the last dimension (head_size) contiguous (stride 1); "
       "make it contiguous first ([5, 8, 128] bf16 cuda:0)"},
      {[](WriteArgs& a) {
         a.key.strides = {-1024, 128, 1, 0};
       },
       "key.stride(0) = -1024: expected >= 0 (negative strides are not supported)"},
      {[](WriteArgs& a) { a.key.data = static_cast<char*>(a.key.data) + 2; },
       "key: data pointer 0x10002 is not 16-byte aligned: cuda moves head rows 16 bytes at a "
       "time"},
      {[](WriteArgs& a) {
         a.value.strides = {1028, 128, 1, 0};
       },
       "value: token stride 1028 elements = 2056 bytes is not a multiple of 16: every head row "
       "must start 16-byte aligned for cuda"},
      {[](WriteArgs& a) {
         a.value.strides = {1024, 132, 1, 0};
       },
       "value: head stride 132 elements = 264 bytes is not a multiple of 16: every head row must "
       "start 16-byte aligned for cuda"},
  };
  for (const Case& c : cases) {
    SetUp();
    c.change(args_);
    const Status s = plan();
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument) << c.message;
    EXPECT_EQ(s.message(), c.message);
  }
}

TEST_F(WritePlanTest, LargeWritesOfEvenGroupCountsRunTwoGroupsAThread) {
  bars_.pair_min_items = 320;  // this write's items: 5 tokens x 8 heads x 8 groups
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 2);
  EXPECT_EQ(desc_.page.data_access_bytes, 16);  // one 16-byte store per side
  bars_.pair_min_items = 321;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 1);
  EXPECT_EQ(desc_.page.data_access_bytes, 8);
  bars_.pair_min_items = 0;
  args_.cache.data = static_cast<char*>(args_.cache.data) + 8;  // pairs only 8-byte aligned
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 2);
  EXPECT_EQ(desc_.page.data_access_bytes, 8);
  args_.cache.data = static_cast<char*>(args_.cache.data) - 8;
  args_.key = make_view(args_.key.data, DType::f32, {5, 8, 128}, kDev);  // f32: always one
  args_.value = make_view(args_.value.data, DType::f32, {5, 8, 128}, kDev);
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 1);
}

TEST_F(WritePlanTest, SmallOneGroupWritesRunOneSideAThread) {
  bars_.split_max_items = 320;  // this write's items
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 1);
  EXPECT_EQ(desc_.sides_per_thread, 1);
  bars_.split_max_items = 319;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 2);
  bars_ = {0, 1000};  // both bars met: the pair wins, with both sides
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 2);
  EXPECT_EQ(desc_.sides_per_thread, 2);
  args_.key = make_view(args_.key.data, DType::f32, {5, 8, 128}, kDev);  // f32 splits too
  args_.value = make_view(args_.value.data, DType::f32, {5, 8, 128}, kDev);
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 1);
  EXPECT_EQ(desc_.sides_per_thread, 1);
}

// A one-side thread that finds a bad device scale must know of its partner's too, so one side a
// thread needs both scales on the host or both on the device (write_kernel.cu).
TEST_F(WritePlanTest, OneSideAThreadOnlyWithBothScalesAlike) {
  bars_.split_max_items = 320;  // this write's items
  args_.k_scale_ptr = static_cast<const float*>(addr(0x80000));
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 2);
  args_.v_scale_ptr = static_cast<const float*>(addr(0x80004));
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 1);
  args_.k_scale_ptr = nullptr;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 2);
}

TEST_F(WritePlanTest, SmallOneGroupWritesLoadEvictFirst) {
  bars_ = {540672, 0, 320};  // this write's items; both sides a thread
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 2);
  EXPECT_EQ(desc_.streaming_loads, 1);
  bars_.stream_max_items = 319;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.streaming_loads, 0);
  bars_ = {540672, 1000, 0};  // one side a thread streams whatever the bar
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 1);
  EXPECT_EQ(desc_.streaming_loads, 1);
  bars_ = {0, 0, 1000};  // the pair wins, and its loads stay on the read-only path
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.groups_per_thread, 2);
  EXPECT_EQ(desc_.streaming_loads, 0);
}

TEST_F(WritePlanTest, OnlyTheSmallestOneSideWritesTriggerTheNextLaunchEarly) {
  bars_ = {540672, 1000, 1000, 320};  // this write's items
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 1);
  EXPECT_EQ(desc_.early_trigger, 1);
  bars_.early_max_items = 319;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 1);
  EXPECT_EQ(desc_.early_trigger, 0);
  bars_ = {540672, 0, 1000, 1000};  // both sides a thread: never early, whatever the bar
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.sides_per_thread, 2);
  EXPECT_EQ(desc_.early_trigger, 0);
}

TEST_F(WritePlanTest, ZeroTokensIsAValidEmptyWrite) {
  args_.key = make_view(addr(0x10000), DType::f32, {0, 8, 128}, kDev);
  args_.value = make_view(addr(0x20000), DType::f32, {0, 8, 128}, kDev);
  args_.slot_mapping = make_view(addr(0x30000), DType::i32, {0}, kDev);
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.page.items, 0u);
  EXPECT_EQ(input_, InputType::f32);
  EXPECT_EQ(desc_.groups_per_thread, 1);  // f32 input: one group a thread
  EXPECT_EQ(desc_.slots_are_i64, 0);
}

TEST_F(WritePlanTest, UnalignedCacheNarrowsTheDataStores) {
  args_.cache.data = static_cast<char*>(args_.cache.data) + 4;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.page.data_access_bytes, 4);
  args_.cache.data = static_cast<char*>(args_.cache.data) + 1;
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.page.data_access_bytes, 1);
}

// The common-path kernel compiles out the device-scale load, __frcp_rn's slow path, the 64-bit
// slot division and the narrow stores: a write that needs any of them must not get it, and only
// the one-wave mapping of one group and both sides a thread has one.
TEST_F(WritePlanTest, CommonPathOnlyWhereNoGeneralPathIsNeeded) {
  bars_ = {540672, 0, 168960, 0};  // both sides a thread, streaming
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 1);
  bars_.stream_max_items = 0;  // past one wave: read-only loads
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 0);
  bars_.stream_max_items = 168960;
  bars_.pair_min_items = 0;  // two groups a thread
  ASSERT_TRUE(plan().is_ok());
  ASSERT_EQ(desc_.groups_per_thread, 2);
  EXPECT_EQ(desc_.common_path, 0);
  bars_.pair_min_items = 540672;
  bars_.split_max_items = 33792;  // one side a thread
  ASSERT_TRUE(plan().is_ok());
  ASSERT_EQ(desc_.sides_per_thread, 1);
  EXPECT_EQ(desc_.common_path, 0);
  bars_.split_max_items = 0;
  args_.cache.data = static_cast<char*>(args_.cache.data) + 4;  // 4-byte data stores
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 0);
  args_.cache.data = static_cast<char*>(args_.cache.data) - 4;
  args_.v_scale_ptr = static_cast<const float*>(addr(0x80000));  // a device scale
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 0);
  args_.v_scale_ptr = nullptr;
  args_.k_scale = 3e-38f;  // a divisor outside the reciprocal window
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 0);
  args_.k_scale = 1.0f;
  addressing_.slots_fit_u31 = 0;  // a cache of more than 2^31 slots: 64-bit slot division
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 0);
  addressing_.slots_fit_u31 = 1;
  args_.slot_mapping = make_view(addr(0x30000), DType::i32, {5}, kDev);  // i32 slots: still common
  ASSERT_TRUE(plan().is_ok());
  EXPECT_EQ(desc_.common_path, 1);
}

// A kernel must not read what it writes: no input inside the cache; reader outputs apart from
// the cache, the slots and each other, and no output element written twice. Refused before any
// launch (reference_cpu makes the same checks with the same messages).
// A negative token count (a wrapped size from the caller) is refused, not wrapped into items.
TEST_F(WritePlanTest, NegativeTokenCountIsRefused) {
  args_.key.shape[0] = -(int64_t{1} << 58) + 5;
  args_.value.shape[0] = args_.key.shape[0];
  args_.slot_mapping.shape[0] = args_.key.shape[0];
  EXPECT_EQ(plan().message(), "key.shape[0] = -288230376151711739: expected >= 0");
}

// The kernels index items with 32 bits: 2^25 + 1 tokens x 8 heads x 8 groups is 2^31 + 64 items,
// refused although the token count alone fits. (Views only: the fake buffers lie 1 TiB apart.)
TEST_F(WritePlanTest, MoreThanTwoToTheThirtyOneItemsAreRefused) {
  const int64_t T = (int64_t{1} << 25) + 1;
  args_.key = make_view(addr(uintptr_t{1} << 40), DType::bf16, {T, 8, 128}, kDev);
  args_.value = make_view(addr(uintptr_t{2} << 40), DType::bf16, {T, 8, 128}, kDev);
  args_.slot_mapping = make_view(addr(uintptr_t{3} << 40), DType::i64, {T}, kDev);
  EXPECT_EQ(plan().message(),
            "33554433 tokens x 8 heads x 8 groups = more than 2^31 work items in one call: split "
            "the batch");
  args_.key.shape[0] = args_.value.shape[0] = args_.slot_mapping.shape[0] = T - 1;  // 2^31 items
  EXPECT_EQ(plan().message(),
            "33554432 tokens x 8 heads x 8 groups = more than 2^31 work items in one call: split "
            "the batch");
  args_.key.shape[0] = args_.value.shape[0] = args_.slot_mapping.shape[0] = T - 2;
  EXPECT_TRUE(plan().is_ok()) << plan().message();
}

// Slots are loaded as whole i64 / i32 elements.
TEST_F(WritePlanTest, MisalignedSlotMappingIsRefused) {
  args_.slot_mapping.data = static_cast<char*>(args_.slot_mapping.data) + 4;
  EXPECT_EQ(plan().message(),
            "slot_mapping: data pointer 0x30004 is not aligned to its 8-byte elements");
  args_.slot_mapping.dtype = DType::i32;
  EXPECT_TRUE(plan().is_ok()) << plan().message();
  args_.slot_mapping.data = static_cast<char*>(args_.slot_mapping.data) + 2;
  EXPECT_EQ(plan().message(),
            "slot_mapping: data pointer 0x30006 is not aligned to its 4-byte elements");
}

TEST_F(WritePlanTest, BuffersThatShareMemoryAreRefused) {
  char* const cache = static_cast<char*>(args_.cache.data);
  args_.key.data = cache + 4096;
  EXPECT_EQ(plan().message(), "key and cache share memory: expected separate buffers");
  args_.key.data = addr(0x10000);
  args_.slot_mapping.data = cache + 184312;  // its last 8 bytes are the slot_mapping's first
  EXPECT_EQ(plan().message(), "slot_mapping and cache share memory: expected separate buffers");
  args_.slot_mapping.data = addr(0x30000);
  args_.k_scale_ptr = static_cast<const float*>(args_.cache.data);  // the kernel reads it (__ldg)
  EXPECT_EQ(plan().message(), "*k_scale_ptr and cache share memory: expected separate buffers");
  args_.k_scale_ptr = static_cast<const float*>(addr(0x80000));
  ASSERT_TRUE(plan().is_ok());

  ReadArgs r = read_args();
  ReadKernelDesc d{};
  ASSERT_TRUE(read_plan(r, &d).is_ok());
  const auto refused = [&] { return read_plan(r, &d); };
  r.value.data = cache;
  EXPECT_EQ(refused().message(), "value and cache share memory: expected separate buffers");
  r.value.data = args_.slot_mapping.data;
  EXPECT_EQ(refused().message(), "value and slot_mapping share memory: expected separate buffers");
  r.value.data = static_cast<float*>(r.key.data) + 128;  // one head row on
  EXPECT_EQ(refused().message(), "key and value share memory: expected separate buffers");
  r.value.data = addr(0x180000);
  r.key.strides = {0, 128, 1, 0};  // every token into the same row
  EXPECT_EQ(refused().message(),
            "key: strides [0, 128, 1] give two elements the same memory: expected an output "
            "where every element has its own");
}

TEST_F(WritePlanTest, ReadRefusesNonF32OutputsAndBadScales) {
  ReadArgs r = read_args();
  ReadKernelDesc d{};
  ASSERT_TRUE(read_plan(r, &d).is_ok());
  EXPECT_EQ(d.page.items, 5u * 8 * 8);
  r.value.dtype = DType::bf16;
  EXPECT_EQ(read_plan(r, &d).message(), "value: dtype bf16: expected f32 (dequantized output)");
  r.value.dtype = DType::f32;
  r.k_scale = -2.0f;
  EXPECT_EQ(read_plan(r, &d).message(), "k_scale = -2: " + std::string(kScaleRule));
}

}  // namespace
}  // namespace kvq::cuda

namespace kvq::cuda {
namespace {

// The kernel table's rule (write_kernel_table.h): each row at the sizes that pick it, on the
// H200's bars; f32 (no pairs) and device scales on one side only skip the rows they cannot use.
TEST(WriteKernelTable, EachRowIsChosenAtItsSizes) {
  const WriteSizeBars bars{540672, 33792, 168960, 16896};
  const auto pick = [&](uint64_t items, bool pairs, bool alike, bool common) {
    return std::string(
        kWriteKernels[choose_write_kernel({items, pairs, alike, common}, bars)].name);
  };
  EXPECT_EQ(pick(540672, true, true, true), "two_groups");
  EXPECT_EQ(pick(540671, true, true, true), "wave");
  EXPECT_EQ(pick(1 << 22, false, true, true), "wave");  // f32 or an odd group count
  EXPECT_EQ(pick(16896, true, true, true), "split_early");
  EXPECT_EQ(pick(16897, true, true, true), "split");
  EXPECT_EQ(pick(33792, true, true, true), "split");
  EXPECT_EQ(pick(33793, true, true, true), "stream_common");
  EXPECT_EQ(pick(33793, true, true, false), "stream");
  EXPECT_EQ(pick(100, true, false, true), "stream_common");  // one device scale: both sides
  EXPECT_EQ(pick(168960, true, true, false), "stream");
  EXPECT_EQ(pick(168961, true, true, true), "wave");
  for (const WriteKernelRow& r : kWriteKernels) {
    EXPECT_NE(std::string(r.tag), "") << r.name << ": every rule cites its measurement";
    EXPECT_TRUE(r.groups == 1 || r.sides == 2) << r.name << ": two groups a thread take both sides";
  }
}

}  // namespace
}  // namespace kvq::cuda
