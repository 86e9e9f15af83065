// The same bytes whatever the thread count, the input dtype's storage, or the input's strides:
// a key that is a view into a fused QKV buffer, a transposed head layout, int32 slots.
#include <gtest/gtest.h>

#include <random>

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

std::vector<uint8_t> write(const WriteArgs& base, int32_t threads) {
  reference_cpu::ReferenceWriter writer(test::options_for(
      kBlocks, kBlockSize, kHeads, kHeadSize, "HND", "linear", "sm100_swizzled", threads));
  std::vector<uint8_t> cache(writer.layout().cache_bytes(), 0x3C);
  WriteArgs a = base;
  a.cache = make_view(cache.data(), DType::u8,
                      {kBlocks, static_cast<int64_t>(writer.layout().page_bytes())});
  const Status s = writer.write(a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return cache;
}

TEST(Threads, OutputIsIdenticalForAnyThreadCount) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  WriteArgs a;
  a.key = k.view(kTokens, kHeads, kHeadSize);
  a.value = v.view(kTokens, kHeads, kHeadSize);
  a.slot_mapping = make_view(in.slots.data(), DType::i64, {kTokens});
  const auto one = write(a, 1);
  for (int32_t threads : {2, 3, 7, 64, 0}) {
    EXPECT_TRUE(write(a, threads) == one) << threads << " threads";
  }
  reference_cpu::ReferenceWriter hw(test::options_for(kBlocks, kBlockSize, kHeads, kHeadSize));
  EXPECT_GE(hw.threads(), 1);
}

TEST(Strides, FusedQkvViewsAndTransposedHeadsGiveTheSameBytes) {
  Inputs in;
  test::Rows k(DType::bf16, in.key), v(DType::bf16, in.value);
  WriteArgs contiguous;
  contiguous.key = k.view(kTokens, kHeads, kHeadSize);
  contiguous.value = v.view(kTokens, kHeads, kHeadSize);
  contiguous.slot_mapping = make_view(in.slots.data(), DType::i64, {kTokens});
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
