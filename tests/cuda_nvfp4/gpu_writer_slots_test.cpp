// Slots past the cache and negative slots: never written (the cache keeps its poison there),
// out-of-range ones counted once per token in the device counter; and refusals a GPU is needed
// for (tensors on another device, a stream of the wrong device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <limits>

#include "gpu_test_support.h"

namespace kvq::cuda_nvfp4::test {
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

    const Nvfp4PageLayout layout(c.spec);
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
    ASSERT_EQ(compare_cache(d.cache.download_all<uint8_t>(), want, layout.descriptor()), "");
  }
}

TEST(GpuWriterSlots, AllSlotsOutOfRangeWritesNothing) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(6);
  WriteCase c = random_case(rng, 3);
  const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
  for (size_t i = 0; i < c.slots.size(); ++i) c.slots[i] = num_slots + static_cast<int64_t>(i);
  const Nvfp4PageLayout layout(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 32);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  DeviceCase d = upload_case(c, initial);
  ASSERT_TRUE(writer->write(d.args).is_ok());
  int64_t count = -1;
  ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
  EXPECT_EQ(count, c.tokens);
  EXPECT_EQ(d.cache.download_all<uint8_t>(), initial);
}

TEST(GpuWriterSlots, TensorsOnAnotherDeviceAreRefused) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(8);
  WriteCase c = random_case(rng, 0);
  const Nvfp4PageLayout layout(c.spec);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  DeviceCase d = upload_case(c, std::vector<uint8_t>(layout.cache_bytes(), 0));
  WriteArgs a = d.args;
  a.value.device = Device::cpu();
  Status s = writer->write(a);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "value is on cpu: expected cuda:0 (the cuda_nvfp4 writer's device)");
  a = d.args;
  a.cache.device = Device::cuda(3);
  s = writer->write(a);
  EXPECT_EQ(s.message(), "cache is on cuda:3: expected cuda:0 (the cuda_nvfp4 writer's device)");
}

TEST(GpuWriterSlots, WriterOnAMissingDeviceIsUnavailable) {
  KVQ_REQUIRE_CUDA_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  BackendOptions o;
  o.cache.num_blocks = 4;
  o.cache.num_kv_heads = 1;
  o.cache.head_size = 64;
  o.device = Device::cuda(count);
  KVCacheWriter* w = nullptr;
  const Status s = CudaNvfp4Writer::create(o, &w);
  EXPECT_EQ(s.code(), ErrorCode::unavailable);
  EXPECT_EQ(s.message(), "cuda:" + std::to_string(count) +
                             " does not exist: " + std::to_string(count) + " CUDA device" +
                             (count == 1 ? "" : "s") + " found");
  o.device = Device::cpu();
  EXPECT_EQ(CudaNvfp4Writer::create(o, &w).message(),
            "cuda_nvfp4 works on CUDA device memory: expected device cuda:N, found cpu");
}

}  // namespace
}  // namespace kvq::cuda_nvfp4::test
