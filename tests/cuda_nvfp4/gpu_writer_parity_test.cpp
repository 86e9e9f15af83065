// Byte parity of the cuda_nvfp4 writer with the format's definition (and reference_cpu) over
// random cases: every page byte, written and unwritten, must equal the host reference's.
#include <gtest/gtest.h>

#include <random>

#include "gpu_test_support.h"

namespace kvq::cuda_nvfp4::test {
namespace {

constexpr int kRandomCases = 240;

TEST(GpuWriterParity, RandomCasesMatchReferenceByteForByte) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(20261202);
  int checked_against_reference_cpu = 0;
  for (int i = 0; i < kRandomCases; ++i) {
    const WriteCase c = random_case(rng, i);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe());
    const Nvfp4PageLayout layout(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 1000 + i);

    std::vector<uint8_t> want = initial;
    reference_write(c, want);
    if (i % 4 == 0) {  // the definition here and reference_cpu agree (a check of the check)
      std::vector<uint8_t> cpu = initial;
      reference_cpu_write(c, cpu);
      ASSERT_EQ(compare_cache(cpu, want, layout.descriptor()), "") << "reference_cpu vs definition";
      ++checked_against_reference_cpu;
    }

    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase d = upload_case(c, initial);
    const Status s = writer->write(d.args);
    ASSERT_TRUE(s.is_ok()) << s.message();
    int64_t skipped = -1;
    ASSERT_TRUE(writer->take_out_of_range_slots(&skipped).is_ok());
    EXPECT_EQ(skipped, 0);
    const auto got = d.cache.download_all<uint8_t>();
    ASSERT_EQ(compare_cache(got, want, layout.descriptor()), "");
  }
  EXPECT_EQ(checked_against_reference_cpu, kRandomCases / 4);
}

// Large writes take the two-groups-a-thread kernel (plan_write: >= pair_min_items, 540,672 items
// on the H200): 12,000 tokens x 8 heads x 8 groups = 768,000 items, in every order, arrangement
// and 16-bit dtype (cases 0..7 and 8..15 of random_case's cycle), the first of them also with
// the cache pointer moved by 8 bytes (8-byte data stores instead of 16) and by 1 (byte stores;
// the pair's 2-byte scale store must fall back to two byte stores).
TEST(GpuWriterParity, LargeWritesMatchReferenceByteForByte) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(20261203);
  const CaseShape shape{8, 128, 16, 12000};
  for (int i = 0; i < 16; ++i) {
    const WriteCase c = random_case(rng, i, &shape);
    const Nvfp4PageLayout layout(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 2000 + i);
    std::vector<uint8_t> want = initial;
    reference_write(c, want);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    DeviceCase d = upload_case(c, initial);
    for (size_t offset : {size_t{0}, size_t{8}, size_t{1}}) {
      if (offset != 0 && i != 0) break;
      SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe() + ", cache pointer + " +
                   std::to_string(offset));
      DeviceBuffer shifted(layout.cache_bytes() + 8);
      ASSERT_FALSE(HasFatalFailure());
      shifted.upload(initial.data(), initial.size(), offset);
      d.args.cache.data = static_cast<uint8_t*>(shifted.get()) + offset;
      const Status s = writer->write(d.args);
      ASSERT_TRUE(s.is_ok()) << s.message();
      std::vector<uint8_t> got(layout.cache_bytes());
      shifted.download(got.data(), got.size(), offset);
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(compare_cache(got, want, layout.descriptor()), "");
    }
  }
}

}  // namespace
}  // namespace kvq::cuda_nvfp4::test
