// The same bytes whatever the thread count, the input dtype's storage, or the input's strides:
// a key that is a view into a fused QKV buffer, a transposed head layout, int32 slots, f16
// subnormals; and the same values whatever the reader's output strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "reference_test_util.h"

namespace kvq {
namespace {

constexpr int64_t kBlocks = 16, kBlockSize = 16, kHeads = 2, kHeadSize = 128;
constexpr int64_t kTokens = 200;

struct Inputs {
  std::vector<float> key, value;  // [T, H, D], bf16-exact
  std::vector<int64_t> slots;
  Inputs() {
    std::mt19937 rng(11);
    std::normal_distribution<float> gauss(0.0f, 2.0f);
    key.resize(kTokens * kHeads * kHeadSize);
    value.resize(key.size());
    for (auto& x : key) x = test::from_bf16(test::to_bf16(gauss(rng)));
    for (auto& x : value) x = test::from_bf16(test::to_bf16(gauss(rng)));
    std::vector<int64_t> all(kBlocks * kBlockSize);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kTokens);
    for (int64_t i = 0; i < kTokens; i += 9) slots[i] = -1;  // padding sprinkled in
  }
};

// All of `in` as one write's inputs, contiguous (the cache left to the caller).
WriteArgs every_token(Inputs& in, test::Rows& k, test::Rows& v) {
  WriteArgs a;
  a.key = k.view(kTokens, kHeads, kHeadSize);
  a.value = v.view(kTokens, kHeads, kHeadSize);
  a.slot_mapping = make_view(in.slots.data(), DType::i64, {kTokens});
  return a;
}

// The cache's bytes after the write (it starts as 0x3C), checking that no write left the cache.
std::vector<uint8_t> write(const WriteArgs& base, int32_t threads) {
  reference_cpu::ReferenceWriter writer(test::options_for(
      kBlocks, kBlockSize, kHeads, kHeadSize, "HND", "linear", "sm100_swizzled", threads));
  test::GuardedCache cache(writer.layout().cache_bytes(), 0x3C);
  WriteArgs a = base;
  a.cache = cache.view(kBlocks, static_cast<int64_t>(writer.layout().page_bytes()));
  const Status s = writer.write(a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cache.guard_damage(), "") << threads << " threads";
  return cache.contents();
}

TEST(Threads, OutputIsIdenticalForAnyThreadCount) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  const WriteArgs a = every_token(in, k, v);
  const auto one = write(a, 1);
  for (int32_t threads : {2, 3, 7, 64, 0}) {
    EXPECT_TRUE(write(a, threads) == one) << threads << " threads";
  }
  reference_cpu::ReferenceWriter hw(test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize));
  EXPECT_EQ(hw.threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
      << "threads: 0 is every hardware thread";
  reference_cpu::ReferenceWriter three(test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize,
                                                         "HND", "linear", "sm100_swizzled", 3));
  EXPECT_EQ(three.threads(), 3);
}

// kv_cache.h: write() may be called from several threads at once on one writer. Four callers
// write a quarter of the tokens each (disjoint slots) into one cache, at the same time, several
// times over: the bytes are those of one write of them all.
TEST(Threads, OneWriterCalledFromSeveralThreadsAtOnce) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  const WriteArgs all = every_token(in, k, v);
  const auto want = write(all, 1);

  reference_cpu::ReferenceWriter writer(test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize,
                                                          "HND", "linear", "sm100_swizzled", 2));
  constexpr int kCallers = 4;
  constexpr int64_t kChunk = kTokens / kCallers;
  static_assert(kTokens % kCallers == 0);
  const int64_t row_bytes = kHeads * kHeadSize * 2;  // bf16
  for (int round = 0; round < 8; ++round) {
    test::GuardedCache cache(writer.layout().cache_bytes(), 0x3C);
    const TensorView cache_view =
        cache.view(kBlocks, static_cast<int64_t>(writer.layout().page_bytes()));
    Status status[kCallers];
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c) {
      callers.emplace_back([&, c] {
        const int64_t first = c * kChunk;  // tokens [first, first + kChunk)
        WriteArgs a;
        a.key =
            make_view(k.bytes.data() + first * row_bytes, DType::bf16, {kChunk, kHeads, kHeadSize});
        a.value =
            make_view(v.bytes.data() + first * row_bytes, DType::bf16, {kChunk, kHeads, kHeadSize});
        a.slot_mapping = make_view(in.slots.data() + first, DType::i64, {kChunk});
        a.cache = cache_view;
        status[c] = writer.write(a);
      });
    }
    for (auto& t : callers) t.join();
    for (const Status& s : status) ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(cache.guard_damage(), "") << "round " << round;
    ASSERT_TRUE(cache.contents() == want) << "round " << round;
  }
}

TEST(Strides, FusedQkvViewsAndTransposedHeadsGiveTheSameBytes) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  const WriteArgs contiguous = every_token(in, k, v);
  const auto expected = write(contiguous, 2);

  // A fused QKV projection output [T, (Hq + 2 H) * D] with Hq = 4 query heads: K and V are views.
  constexpr int64_t kQueryHeads = 4, kWidth = (kQueryHeads + 2 * kHeads) * kHeadSize;
  std::vector<uint16_t> qkv(kTokens * kWidth, 0x7fc0);  // q part: NaN, must not be read
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t e = 0; e < kHeads * kHeadSize; ++e) {
      qkv[t * kWidth + kQueryHeads * kHeadSize + e] =
          test::to_bf16(in.key[t * kHeads * kHeadSize + e]);
      qkv[t * kWidth + (kQueryHeads + kHeads) * kHeadSize + e] =
          test::to_bf16(in.value[t * kHeads * kHeadSize + e]);
    }
  }
  WriteArgs fused = contiguous;
  fused.key =
      make_view(qkv.data() + kQueryHeads * kHeadSize, DType::bf16, {kTokens, kHeads, kHeadSize});
  fused.key.strides = {kWidth, kHeadSize, 1, 0};
  fused.value = make_view(qkv.data() + (kQueryHeads + kHeads) * kHeadSize, DType::bf16,
                          {kTokens, kHeads, kHeadSize});
  fused.value.strides = {kWidth, kHeadSize, 1, 0};
  EXPECT_TRUE(write(fused, 2) == expected) << "fused QKV views";

  // Heads innermost in memory ([T, D, H] storage viewed as [T, H, D]) and int32 slots.
  std::vector<float> key_tdh(in.key.size());
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t d = 0; d < kHeadSize; ++d)
        key_tdh[(t * kHeadSize + d) * kHeads + h] = in.key[(t * kHeads + h) * kHeadSize + d];
  test::Rows kt(DType::bf16, key_tdh);
  std::vector<int32_t> slots32(in.slots.begin(), in.slots.end());
  WriteArgs transposed = contiguous;
  transposed.key = make_view(kt.bytes.data(), DType::bf16, {kTokens, kHeads, kHeadSize});
  transposed.key.strides = {kHeads * kHeadSize, 1, kHeads, 0};
  transposed.slot_mapping = make_view(slots32.data(), DType::i32, {kTokens});
  EXPECT_TRUE(write(transposed, 3) == expected) << "transposed heads, int32 slots";

  // The same values stored as f32, which holds every bf16 value exactly.
  test::Rows kf(DType::f32, in.key), vf(DType::f32, in.value);
  WriteArgs f32 = contiguous;
  f32.key = kf.view(kTokens, kHeads, kHeadSize);
  f32.value = vf.view(kTokens, kHeads, kHeadSize);
  EXPECT_TRUE(write(f32, 1) == expected) << "f32 storage of the same values";
}

// f16 subnormals (m x 2^-24) convert exactly too: with scales that lift them into NVFP4's range,
// their bytes equal those of the same values stored as f32.
TEST(Dtypes, F16SubnormalsGiveTheBytesOfTheirF32Values) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> mantissa(1, 0x3FF);
  const size_t n = kTokens * kHeads * kHeadSize;
  std::vector<uint16_t> key16(n), value16(n);
  std::vector<float> key32(n), value32(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t mk = mantissa(rng), mv = mantissa(rng), sign = (rng() & 1u) << 15;
    key16[i] = static_cast<uint16_t>(sign | mk);
    value16[i] = static_cast<uint16_t>(mv);
    key32[i] = std::ldexp(static_cast<float>(mk), -24) * (sign ? -1.0f : 1.0f);
    value32[i] = std::ldexp(static_cast<float>(mv), -24);
  }
  Inputs in;
  WriteArgs f16;
  f16.key = make_view(key16.data(), DType::f16, {kTokens, kHeads, kHeadSize});
  f16.value = make_view(value16.data(), DType::f16, {kTokens, kHeads, kHeadSize});
  f16.slot_mapping = make_view(in.slots.data(), DType::i64, {kTokens});
  f16.k_scale = std::ldexp(1.0f, -20);  // |x| / k_scale in [2^-4, 64)
  f16.v_scale = std::ldexp(1.0f, -18);
  WriteArgs f32 = f16;
  f32.key = make_view(key32.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  f32.value = make_view(value32.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  const auto expected = write(f32, 1);
  EXPECT_TRUE(write(f16, 1) == expected);
}

// The reader honours each output's own strides, padding tokens included: key into [T, H, D] rows
// padded to kRow floats, value into [T, D, H] storage, against a read into contiguous outputs.
// The key's padding floats keep their 7.0f.
TEST(Strides, ReadOutputsOfDifferentStridesGetTheSameValues) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  WriteArgs w;
  w.key = k.view(kTokens, kHeads, kHeadSize);
  w.value = v.view(kTokens, kHeads, kHeadSize);
  w.slot_mapping = make_view(in.slots.data(), DType::i64, {kTokens});
  auto cache = write(w, 1);
  reference_cpu::ReferenceReader reader(
      test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize, "HND", "linear", "sm100_swizzled"));
  const size_t n = in.key.size();
  std::vector<float> key(n), value(n), value_tdh(n, 7.0f);
  constexpr int64_t kRow = kHeadSize + 8;  // each key row [D] followed by 8 unused floats
  std::vector<float> key_padded(kTokens * kHeads * kRow, 7.0f);  // [T, H, kRow]
  ReadArgs r;
  r.cache = make_view(cache.data(), DType::u8,
                      {kBlocks, static_cast<int64_t>(reader.layout().page_bytes())});
  r.slot_mapping = w.slot_mapping;
  r.key = make_view(key.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  r.value = make_view(value.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  ASSERT_TRUE(reader.read(r).is_ok());
  r.key = make_view(key_padded.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  r.key.strides = {kHeads * kRow, kRow, 1, 0};
  r.value = make_view(value_tdh.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  r.value.strides = {kHeads * kHeadSize, 1, kHeads, 0};
  ASSERT_TRUE(reader.read(r).is_ok());
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const auto where = [&](int64_t d) {
        return "token " + std::to_string(t) + " (slot " + std::to_string(in.slots[t]) + "), head " +
               std::to_string(h) + ", element " + std::to_string(d);
      };
      for (int64_t d = 0; d < kRow; ++d) {
        ASSERT_EQ(key_padded[(t * kHeads + h) * kRow + d],
                  d < kHeadSize ? key[(t * kHeads + h) * kHeadSize + d] : 7.0f)
            << "key " << where(d);
      }
      for (int64_t d = 0; d < kHeadSize; ++d) {
        ASSERT_EQ(value_tdh[(t * kHeadSize + d) * kHeads + h],
                  value[(t * kHeads + h) * kHeadSize + d])
            << "value " << where(d);
      }
    }
  }
}

TEST(Tokens, ZeroTokensWriteNothing) {
  std::vector<int64_t> none;
  std::vector<uint16_t> empty;
  WriteArgs a;
  a.key = make_view(empty.data(), DType::bf16, {0, kHeads, kHeadSize});
  a.value = make_view(empty.data(), DType::bf16, {0, kHeads, kHeadSize});
  a.slot_mapping = make_view(none.data(), DType::i64, {0});
  const auto cache = write(a, 2);
  for (uint8_t b : cache) ASSERT_EQ(b, 0x3C);
}

}  // namespace
}  // namespace kvq
