// Slots past the cache and negative slots: never written (the cache keeps its poison there, and
// the guard bands around it theirs), out-of-range ones counted once per token in the device
// counter; and that the guard bands these checks rely on show a byte put just outside the cache.
// (Tensors, streams and writers on another or a missing device: two_writers_test.cpp.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_support.h"

namespace kvq::cuda::test {
namespace {

// A small write (one side a thread) and one of 768,192 items (two groups a thread on the H200,
// which looks at the slot before loading the row).
TEST(GpuWriterSlots, OutOfRangeAndNegativeSlotsAreSkippedAndCounted) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const CaseShape large{8, 128, 16, 12003};
  struct SlotCase {
    DType slot_dtype;
    const CaseShape* shape;  // nullptr: random_case's small geometry
  };
  for (const SlotCase& sc : {SlotCase{DType::i64, nullptr}, SlotCase{DType::i32, nullptr},
                             SlotCase{DType::i64, &large}, SlotCase{DType::i32, &large}}) {
    const DType slot_dtype = sc.slot_dtype;
    std::mt19937_64 rng(5);
    WriteCase c = random_case(rng, 0, sc.shape);
    c.slot_dtype = slot_dtype;
    SCOPED_TRACE(c.describe());
    const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
    ASSERT_GE(c.tokens, 1);
    // Overwrite some slots with bad values; keep the rest distinct and valid.
    const int64_t big = slot_dtype == DType::i64 ? std::numeric_limits<int64_t>::max()
                                                 : std::numeric_limits<int32_t>::max();
    const int64_t small = slot_dtype == DType::i64 ? std::numeric_limits<int64_t>::min()
                                                   : std::numeric_limits<int32_t>::min();
    const int64_t bad[] = {num_slots, num_slots + 1, big, -1, -2, small, 2 * num_slots + 7};
    int64_t expected_out_of_range = 0;
    for (size_t k = 0; k < std::size(bad) && static_cast<int64_t>(k) < c.tokens; ++k) {
      c.slots[static_cast<size_t>(k * 7 % c.tokens)] = bad[k];
    }
    for (int64_t s : c.slots) expected_out_of_range += s >= num_slots ? 1 : 0;
    ASSERT_GT(expected_out_of_range, 0);

    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 31);
    std::vector<uint8_t> want = initial;
    reference_write(c, want);  // skips both kinds
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase d = upload_case(c, initial);
    ASSERT_TRUE(writer->write(d.args).is_ok());
    ASSERT_TRUE(writer->write(d.args).is_ok());  // twice: the count adds up
    int64_t count = -1;
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, 2 * expected_out_of_range);
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, 0) << "take_out_of_range_slots must reset the counter";
    const Status null_count = writer->take_out_of_range_slots(nullptr);
    EXPECT_EQ(null_count.code(), ErrorCode::invalid_argument) << null_count.message();
    ASSERT_EQ(compare_cache(d, want, layout.descriptor()), "");
  }
}

TEST(GpuWriterSlots, AllSlotsOutOfRangeWritesNothing) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(6);
  WriteCase c = random_case(rng, 3);
  const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
  for (size_t i = 0; i < c.slots.size(); ++i) c.slots[i] = num_slots + static_cast<int64_t>(i);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 32);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  DeviceCase d = upload_case(c, initial);
  ASSERT_TRUE(writer->write(d.args).is_ok());
  int64_t count = -1;
  ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
  EXPECT_EQ(count, c.tokens);
  EXPECT_EQ(compare_cache(d, initial, layout.descriptor()), "");
}

// The check of the checks above: one byte changed just before the cache and one just after it
// (with the cache pointer misaligned, as the parity tests move it) are both reported, and the
// cache itself still compares equal.
TEST(GpuWriterSlots, GuardBandsShowABytePutJustOutsideTheCache) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(7);
  const WriteCase c = random_case(rng, 0);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 33);
  for (const size_t offset : {size_t{0}, size_t{1}, size_t{8}}) {
    SCOPED_TRACE("cache pointer + " + std::to_string(offset));
    DeviceCase d = upload_case(c, initial, offset);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(reinterpret_cast<uintptr_t>(d.args.cache.data) % 256, offset);
    ASSERT_EQ(compare_cache(d, initial, layout.descriptor()), "");
    ASSERT_EQ(d.guards_changed(), "");
    auto* cache = static_cast<uint8_t*>(d.args.cache.data);
    const uint8_t before = static_cast<uint8_t>(d.front_guard.back() ^ 0xFF);
    const uint8_t after = static_cast<uint8_t>(d.back_guard.front() ^ 0xFF);
    check_cuda(cudaMemcpy(cache - 1, &before, 1, cudaMemcpyHostToDevice), "H2D before");
    check_cuda(cudaMemcpy(cache + initial.size(), &after, 1, cudaMemcpyHostToDevice), "H2D after");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_TRUE(d.download_cache() == initial) << "the cache itself changed";
    const std::string guards = d.guards_changed();
    EXPECT_NE(guards.find("1 bytes of the guard band before the cache changed"), std::string::npos)
        << guards;
    EXPECT_NE(guards.find("from cache byte -1 (page -1, offset " +
                          std::to_string(layout.page_bytes() - 1) + ")"),
              std::string::npos)
        << guards;
    EXPECT_NE(guards.find("; 1 bytes of the guard band after the cache changed, from cache byte " +
                          std::to_string(initial.size()) + " (page " +
                          std::to_string(c.spec.num_blocks) + ", offset 0)"),
              std::string::npos)
        << guards;
    const std::string compared = compare_cache(d, initial, layout.descriptor());
    EXPECT_EQ(compared, "written outside the cache: " + guards);
  }
}

}  // namespace
}  // namespace kvq::cuda::test
