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

}  // namespace
}  // namespace kvq::cuda_nvfp4::test
