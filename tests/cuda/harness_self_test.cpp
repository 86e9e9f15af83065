// The GPU tests' own host side, checked without a GPU (so a broken harness shows up in CI, not
// on borrowed GPU time): the cases it generates are valid writes, and its reference (the
// definition: nvfp4_quantize_group at the descriptor's offsets) equals reference_cpu's bytes.
#include <gtest/gtest.h>

#include <random>

#include "gpu_test_support.h"

namespace kvq::cuda::test {
namespace {

// The 240 cases of GpuWriterParity.RandomCasesMatchReferenceByteForByte (same seed, same order,
// same poison): every reference cache that test holds the GPU's bytes to is reference_cpu's too.
TEST(HarnessSelfCheck, RandomCasesAndTheReferenceAgreeWithReferenceCpu) {
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < 240; ++i) {
    const WriteCase c = random_case(rng, i);
    SCOPED_TRACE(c.describe());
    ASSERT_EQ(c.slots.size(), static_cast<size_t>(c.tokens));
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 1000 + i);
    std::vector<uint8_t> want = initial, cpu = initial;
    reference_write(c, want);
    reference_cpu_write(c, cpu);
    ASSERT_EQ(compare_cache(cpu, want, layout.descriptor()), "");
    ASSERT_NE(compare_cache(initial, want, layout.descriptor()), "") << "nothing was written";
  }
}

TEST(HarnessSelfCheck, ElementConversionsAreExact) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN payloads are not round-tripped
    ASSERT_EQ(float_to_f16_exact(f), h) << std::hex << h;
    ASSERT_EQ(float_to_bf16_exact(bf16_to_float(static_cast<uint16_t>(h))), h);
  }
}

}  // namespace
}  // namespace kvq::cuda::test
