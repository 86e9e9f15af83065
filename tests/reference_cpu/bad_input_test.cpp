// Bad writes: each is refused with its exact message, and the cache is left bit-for-bit as it was
// (the bad value sits after good tokens, so a writer that wrote as it checked would be caught).
// The cache sits between guard bands (GuardedCache) that no write, refused or not, may change.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "kvq/core/scale_rule.h"
#include "kvq/core/status.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "reference_test_util.h"

namespace kvq {
namespace {

// num_blocks 4 x block_size 16 = 64 slots; H = 2, D = 64; page = 2 * (2*16*32 + 2*16*4) = 2304.
constexpr int64_t kBlocks = 4, kBlockSize = 16, kHeads = 2, kHeadSize = 64, kPage = 2304;
constexpr int64_t kTokens = 8;

class BadWrite : public ::testing::Test {
 protected:
  reference_cpu::ReferenceWriter writer{test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize)};
  std::vector<uint16_t> key = std::vector<uint16_t>(kTokens * kHeads * kHeadSize, 0x3f80);
  std::vector<uint16_t> value = std::vector<uint16_t>(kTokens * kHeads * kHeadSize, 0xbf80);
  std::vector<int64_t> slots = {0, 17, 33, 49, -1, 2, 63, 40};
  test::GuardedCache cache{kBlocks * kPage, 0};
  std::vector<uint8_t> before;  // cache.contents() before the write
  WriteArgs args;

  void SetUp() override {
    ASSERT_EQ(writer.layout().page_bytes(), static_cast<uint64_t>(kPage));
    std::mt19937 rng(3);
    for (size_t i = 0; i < cache.size(); ++i) cache.data()[i] = static_cast<uint8_t>(rng());
    before = cache.contents();
    args.key = make_view(key.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
    args.value = make_view(value.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
    args.slot_mapping = make_view(slots.data(), DType::i64, {kTokens});
    args.cache = cache.view(kBlocks, kPage);
  }

  void expect_refused(ErrorCode code, const std::string& message) {
    const Status s = writer.write(args);
    EXPECT_FALSE(s.is_ok()) << "expected: " << message;
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_EQ(s.message(), message);
    EXPECT_TRUE(cache.contents() == before) << "a refused write changed the cache";
    EXPECT_EQ(cache.guard_damage(), "") << "a refused write landed outside the cache";
  }
};

TEST_F(BadWrite, TheUnchangedArgumentsAreFine) {
  const Status s = writer.write(args);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(cache.contents() == before);
  EXPECT_EQ(cache.guard_damage(), "");
  int64_t skipped = -1;
  ASSERT_TRUE(writer.take_out_of_range_slots(&skipped).is_ok());
  EXPECT_EQ(skipped, 0);
}

// Every negative slot is padding, not only -1; the cache's first and last slots (0 and 63) and
// those either side of a page boundary (15, 16) are written without touching the guards.
TEST_F(BadWrite, EdgeAndNegativeSlotsStayInsideTheCache) {
  slots = {63, -2, 0, -17, 15, -16, 16, -1};
  const Status s = writer.write(args);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(cache.contents() == before);
  EXPECT_EQ(cache.guard_damage(), "");
}

TEST_F(BadWrite, SlotOutOfRange) {
  slots[7] = 64;
  expect_refused(ErrorCode::out_of_range,
                 "slot_mapping[7] = 64: expected < 64 (num_blocks 4 x block_size 16; negative "
                 "slots are padding)");
  slots[7] = std::numeric_limits<int64_t>::max();
  expect_refused(ErrorCode::out_of_range,
                 "slot_mapping[7] = 9223372036854775807: expected < 64 (num_blocks 4 x "
                 "block_size 16; negative slots are padding)");
}

TEST_F(BadWrite, SlotOutOfRangeAsInt32) {
  std::vector<int32_t> s32 = {0, 1, 2, 3, 4, 5, 6, 4096};
  args.slot_mapping = make_view(s32.data(), DType::i32, {kTokens});
  expect_refused(ErrorCode::out_of_range,
                 "slot_mapping[7] = 4096: expected < 64 (num_blocks 4 x block_size 16; negative "
                 "slots are padding)");
}

TEST_F(BadWrite, SameSlotTwice) {
  slots[5] = 33;  // slot_mapping[2] has it
  slots[7] = 0;   // and slot_mapping[0]: the earliest repeat (index 5) is reported
  expect_refused(ErrorCode::invalid_argument,
                 "slot_mapping[5] = 33: the same slot as slot_mapping[2]: expected each slot at "
                 "most once per write");
}

TEST_F(BadWrite, WrongDtypes) {
  args.key.dtype = DType::i32;
  expect_refused(ErrorCode::invalid_argument,
                 "key: dtype i32: expected bf16, f16 or f32 (reference_cpu's input dtypes)");
  args.key.dtype = DType::bf16;
  args.value.dtype = DType::f16;
  expect_refused(ErrorCode::invalid_argument, "value: dtype f16: expected bf16 (the dtype of key)");
  args.value.dtype = DType::bf16;
  args.slot_mapping.dtype = DType::f32;
  expect_refused(ErrorCode::invalid_argument, "slot_mapping: dtype f32: expected i64 or i32");
  args.slot_mapping.dtype = DType::i64;
  args.cache.dtype = DType::i32;
  expect_refused(ErrorCode::invalid_argument, "cache: dtype i32: expected u8");
}

TEST_F(BadWrite, WrongShapes) {
  args.key = make_view(key.data(), DType::bf16, {kTokens, 4, 32});
  expect_refused(ErrorCode::invalid_argument, "key.shape[1] = 4: expected 2 (num_kv_heads)");
  args.key = make_view(key.data(), DType::bf16, {kTokens * 2, 1, kHeadSize});
  expect_refused(ErrorCode::invalid_argument, "key.shape[1] = 1: expected 2 (num_kv_heads)");
  args.key = make_view(key.data(), DType::bf16, {kTokens, kHeads, kHeadSize / 2});
  expect_refused(ErrorCode::invalid_argument, "key.shape[2] = 32: expected 64 (head_size)");
  args.key = make_view(key.data(), DType::bf16, {kTokens, kHeads * kHeadSize});
  expect_refused(ErrorCode::invalid_argument,
                 "key: [8, 128] bf16 cpu: expected 3 dimensions [num_tokens, num_kv_heads, "
                 "head_size]");
  args.key = make_view(key.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
  args.value = make_view(value.data(), DType::bf16, {kTokens - 1, kHeads, kHeadSize});
  expect_refused(ErrorCode::invalid_argument, "value.shape[0] = 7: expected 8 (num_tokens of key)");
}

TEST_F(BadWrite, TokenCountOfKeyAndSlotMappingDiffer) {
  args.slot_mapping = make_view(slots.data(), DType::i64, {kTokens - 1});
  expect_refused(ErrorCode::invalid_argument,
                 "slot_mapping.shape[0] = 7: expected 8 (num_tokens of key)");
  args.slot_mapping = make_view(slots.data(), DType::i64, {kTokens, 1});
  expect_refused(ErrorCode::invalid_argument,
                 "slot_mapping: [8, 1] i64 cpu: expected 1 dimension [num_tokens]");
}

TEST_F(BadWrite, BadScales) {
  const std::string rule = std::string(": ") + kScaleRule;
  args.k_scale = 0.0f;
  expect_refused(ErrorCode::invalid_argument, "k_scale = 0" + rule);
  args.k_scale = -1.0f;
  expect_refused(ErrorCode::invalid_argument, "k_scale = -1" + rule);
  args.k_scale = 1e-40f;  // finite and > 0, but 1 / k_scale is infinite
  expect_refused(ErrorCode::invalid_argument, "k_scale = 1e-40" + rule);
  args.k_scale = 1.0f;
  args.v_scale = std::numeric_limits<float>::quiet_NaN();
  expect_refused(ErrorCode::invalid_argument, "v_scale = nan" + rule);
  args.v_scale = std::numeric_limits<float>::infinity();
  expect_refused(ErrorCode::invalid_argument, "v_scale = inf" + rule);
  args.v_scale = 1.0f;
  float zero = 0.0f;
  args.k_scale_ptr = &zero;
  expect_refused(ErrorCode::invalid_argument, "*k_scale_ptr = 0" + rule);
}

TEST_F(BadWrite, CacheTooSmallOrStrided) {
  args.cache = make_view(cache.data(), DType::u8, {kBlocks - 1, kPage});
  expect_refused(ErrorCode::invalid_argument,
                 "cache: shape [3, 2304]: expected [4, 2304] (num_blocks x page_bytes; the buffer "
                 "is too small)");
  args.cache = make_view(cache.data(), DType::u8, {kBlocks, kPage - 1});
  expect_refused(ErrorCode::invalid_argument,
                 "cache: shape [4, 2303]: expected [4, 2304] (num_blocks x page_bytes; the buffer "
                 "is too small)");
  args.cache = make_view(cache.data(), DType::u8, {kBlocks / 2, kPage});
  args.cache.shape[0] = kBlocks;
  args.cache.strides[0] = kPage / 2;
  expect_refused(ErrorCode::invalid_argument,
                 "cache: strides [1152, 1]: expected contiguous [2304, 1]");
  args.cache = make_view(cache.data(), DType::u8, {kBlocks * kPage});
  expect_refused(ErrorCode::invalid_argument,
                 "cache: [9216] u8 cpu: expected 2 dimensions [num_blocks, page_bytes]");
  // Too large is refused as well: a cache of another geometry, whose pages the layout's offsets
  // would misplace.
  test::GuardedCache larger((kBlocks + 1) * kPage, 0);
  args.cache = larger.view(kBlocks + 1, kPage);
  expect_refused(ErrorCode::invalid_argument,
                 "cache: shape [5, 2304]: expected [4, 2304] (num_blocks x page_bytes)");
  args.cache = make_view(larger.data(), DType::u8, {kBlocks, kPage + 1});
  expect_refused(ErrorCode::invalid_argument,
                 "cache: shape [4, 2305]: expected [4, 2304] (num_blocks x page_bytes)");
  EXPECT_TRUE(larger.contents() == std::vector<uint8_t>(larger.size(), 0));
  EXPECT_EQ(larger.guard_damage(), "");
}

TEST_F(BadWrite, DevicesStridesAndAliasing) {
  args.key.device = Device::cuda(0);
  expect_refused(ErrorCode::invalid_argument,
                 "key: [8, 2, 64] bf16 cuda:0: expected host memory (cpu) (the writer's device)");
  args.key.device = Device::cpu();
  args.value.strides[1] = -64;
  expect_refused(ErrorCode::invalid_argument,
                 "value.stride(1) = -64: expected >= 0 (negative strides are not supported)");
  args.value.strides[1] = 64;
  args.key.data = nullptr;
  expect_refused(ErrorCode::invalid_argument,
                 "key: [8, 2, 64] bf16 cpu has no data (null pointer)");
  args.key = make_view(cache.data() + 100, DType::bf16, {kTokens, kHeads, kHeadSize});
  expect_refused(ErrorCode::invalid_argument,
                 "key and cache share memory: expected separate buffers");
  args.key = make_view(key.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
  // Each input on its own: the value rows and the slots inside the cache.
  std::memcpy(cache.data() + 64, value.data(), value.size() * sizeof(uint16_t));
  before = cache.contents();
  args.value = make_view(cache.data() + 64, DType::bf16, {kTokens, kHeads, kHeadSize});
  expect_refused(ErrorCode::invalid_argument,
                 "value and cache share memory: expected separate buffers");
  args.value = make_view(value.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
  std::memcpy(cache.data() + kPage * kBlocks - 64, slots.data(), slots.size() * sizeof(int64_t));
  before = cache.contents();
  args.slot_mapping = make_view(cache.data() + kPage * kBlocks - 64, DType::i64, {kTokens});
  expect_refused(ErrorCode::invalid_argument,
                 "slot_mapping and cache share memory: expected separate buffers");
}

// Found by review: views the checks above passed but whose use was undefined or out of bounds.
TEST_F(BadWrite, NegativeSizesMisalignmentAndWrappingViews) {
  args.key.shape[0] = args.value.shape[0] = args.slot_mapping.shape[0] = -5;
  expect_refused(ErrorCode::invalid_argument, "key.shape[0] = -5: expected >= 0");
  args.key.shape[0] = args.value.shape[0] = args.slot_mapping.shape[0] = kTokens;
  args.slot_mapping.data = reinterpret_cast<uint8_t*>(slots.data()) + 4;
  args.slot_mapping.shape[0] = kTokens - 1;
  args.key.shape[0] = args.value.shape[0] = kTokens - 1;
  expect_refused(ErrorCode::invalid_argument,
                 fmt::format("slot_mapping: data pointer {} is not aligned to its 8-byte elements",
                             args.slot_mapping.data));
  args = WriteArgs{};
  SetUp();
  // A slot view whose element 1 lies, past 2^64 bytes, on the cache: refused before any slot is
  // read (the CPU writer once validated the slot there, then wrote over it).
  const uint64_t delta =
      reinterpret_cast<uintptr_t>(cache.data()) - reinterpret_cast<uintptr_t>(slots.data());
  args.slot_mapping = make_view(slots.data(), DType::i64, {2});
  args.slot_mapping.strides[0] = static_cast<int64_t>((delta / 8) + (uint64_t{1} << 61));
  args.key.shape[0] = args.value.shape[0] = 2;
  expect_refused(ErrorCode::invalid_argument,
                 "slot_mapping and cache share memory: expected separate buffers");
}

TEST_F(BadWrite, ScalePointersAreAlignedAndOutsideTheCache) {
  alignas(8) float scales[2] = {1.0f, 1.0f};
  args.k_scale_ptr = reinterpret_cast<const float*>(reinterpret_cast<uint8_t*>(scales) + 2);
  expect_refused(ErrorCode::invalid_argument,
                 fmt::format("*k_scale_ptr: data pointer {} is not aligned to its 4-byte elements",
                             static_cast<const void*>(args.k_scale_ptr)));
  const float one = 1.0f;
  std::memcpy(cache.data() + 64, &one, sizeof one);
  before = cache.contents();
  args.k_scale_ptr = reinterpret_cast<const float*>(cache.data() + 64);
  expect_refused(ErrorCode::invalid_argument,
                 "*k_scale_ptr and cache share memory: expected separate buffers");
  args.k_scale_ptr = &scales[0];
  const Status s = writer.write(args);
  EXPECT_TRUE(s.is_ok()) << s.message();
}

TEST(BadBackendOptions, DeviceThreadsAndLayout) {
  auto o = test::options_for(4, 16, 2, 64);
  o.device = Device::cuda(0);
  try {
    reference_cpu::ReferenceWriter w(o);
    FAIL() << "accepted a CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_STREQ(e.what(),
                 "reference_cpu works on host memory: device cuda:0 is not supported (use device: "
                 "cpu or auto)");
  }
  o = test::options_for(4, 16, 2, 64);
  o.threads = -2;
  EXPECT_THROW(reference_cpu::ReferenceReader r(o), Error);
  // The layout's own refusal passes through with the config key at fault.
  try {
    reference_cpu::ReferenceWriter w(test::options_for(4, 16, 2, 80));
    FAIL() << "accepted head_size 80 with sm100_swizzled V scales";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(e.key(), "cache.head_size");
  }
}

class BadRead : public ::testing::Test {
 protected:
  reference_cpu::ReferenceReader reader{test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize)};
  std::vector<uint8_t> cache = std::vector<uint8_t>(kBlocks * kPage, 0x11);
  std::vector<int64_t> slots = {3, -1, 63, 5};
  std::vector<float> key = std::vector<float>(4 * kHeads * kHeadSize, 9.0f);
  std::vector<float> value = std::vector<float>(4 * kHeads * kHeadSize, 9.0f);
  ReadArgs args;

  void SetUp() override {
    args.cache = make_view(cache.data(), DType::u8, {kBlocks, kPage});
    args.slot_mapping = make_view(slots.data(), DType::i64, {4});
    args.key = make_view(key.data(), DType::f32, {4, kHeads, kHeadSize});
    args.value = make_view(value.data(), DType::f32, {4, kHeads, kHeadSize});
  }
  void expect_refused(ErrorCode code, const std::string& message) {
    const Status s = reader.read(args);
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_EQ(s.message(), message);
    for (float x : key) ASSERT_EQ(x, 9.0f) << "a refused read wrote its key output";
    for (float x : value) ASSERT_EQ(x, 9.0f) << "a refused read wrote its value output";
  }
};

TEST_F(BadRead, Refusals) {
  ASSERT_TRUE(BadRead::reader.read(args).is_ok());
  std::fill(key.begin(), key.end(), 9.0f);
  std::fill(value.begin(), value.end(), 9.0f);
  slots[2] = 64;
  expect_refused(ErrorCode::out_of_range,
                 "slot_mapping[2] = 64: expected < 64 (num_blocks 4 x block_size 16; negative "
                 "slots are padding)");
  slots[2] = 63;
  args.key.dtype = DType::bf16;
  expect_refused(ErrorCode::invalid_argument, "key: dtype bf16: expected f32 (dequantized output)");
  args.key = make_view(key.data(), DType::f32, {3, kHeads, kHeadSize});
  expect_refused(ErrorCode::invalid_argument,
                 "key.shape[0] = 3: expected 4 (num_tokens of slot_mapping)");
  args.key = make_view(key.data(), DType::f32, {4, kHeads, kHeadSize});
  args.value = args.key;
  expect_refused(ErrorCode::invalid_argument,
                 "key and value share memory: expected separate buffers");
  args.value = make_view(value.data(), DType::f32, {4, kHeads, kHeadSize});
  args.value.strides = {0, kHeadSize, 1, 0};  // every token into the same rows
  expect_refused(ErrorCode::invalid_argument,
                 "value: strides [0, " + std::to_string(kHeadSize) +
                     ", 1] give two elements the same memory: expected an "
                     "output where every element has its own");
  // An output over the slots it reads (the slots live in the first bytes of the value buffer).
  std::vector<float> value_and_slots(4 * kHeads * kHeadSize, 9.0f);
  std::memcpy(value_and_slots.data(), slots.data(), slots.size() * sizeof(int64_t));
  const std::vector<float> value_and_slots_before = value_and_slots;
  args.slot_mapping = make_view(value_and_slots.data(), DType::i64, {4});
  args.value = make_view(value_and_slots.data(), DType::f32, {4, kHeads, kHeadSize});
  expect_refused(ErrorCode::invalid_argument,
                 "value and slot_mapping share memory: expected separate buffers");
  // Compared as bytes: slot -1 reads as a NaN float.
  EXPECT_EQ(std::memcmp(value_and_slots.data(), value_and_slots_before.data(),
                        value_and_slots.size() * sizeof(float)),
            0)
      << "a refused read wrote its value output";
}

TEST_F(BadRead, NegativeTokenCountIsRefused) {
  args.slot_mapping.shape[0] = args.key.shape[0] = args.value.shape[0] = -5;
  expect_refused(ErrorCode::invalid_argument, "slot_mapping.shape[0] = -5: expected >= 0");
}

TEST_F(BadRead, ScalesFollowTheWritersRule) {
  const std::string rule = std::string(": ") + kScaleRule;
  args.k_scale = 0.0f;
  expect_refused(ErrorCode::invalid_argument, "k_scale = 0" + rule);
  args.k_scale = 1.0f;
  args.v_scale = std::numeric_limits<float>::quiet_NaN();
  expect_refused(ErrorCode::invalid_argument, "v_scale = nan" + rule);
  args.v_scale = -std::numeric_limits<float>::infinity();
  expect_refused(ErrorCode::invalid_argument, "v_scale = -inf" + rule);
}

}  // namespace
}  // namespace kvq
