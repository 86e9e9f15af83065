// Byte parity of the cuda writer with the format's definition (and reference_cpu) over
// random cases: every page byte, written and unwritten, must equal the host reference's.
#include <gtest/gtest.h>

#include <random>
#include <utility>

#include "gpu_test_support.h"

namespace kvq::cuda::test {
namespace {

constexpr int kRandomCases = 240;  // harness_self_test.cpp checks the same 240 cases

// (That the reference here equals reference_cpu's bytes on each of these cases, same seed and
// poison, is HarnessSelfCheck.RandomCasesAndTheReferenceAgreeWithReferenceCpu: no GPU needed.)
TEST(GpuWriterParity, RandomCasesMatchReferenceByteForByte) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(20261202);
  for (int i = 0; i < kRandomCases; ++i) {
    const WriteCase c = random_case(rng, i);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe());
    ASSERT_EQ(write_differs_from_reference(c, 1000 + i), "");
  }
}

// Each thread mapping (plan_write; the H200's bars: two groups a thread from 540,672 items, one
// side a thread up to 33,792, streaming loads up to 168,960) on writes large enough to take it,
// in every order and arrangement:
//   12,003 tokens x 8 heads x 8 groups = 768,192 items: two groups a thread for 16-bit input
//     (cases 0..15 of random_case's cycle), in HND pages in token runs of 8 (and 3 tokens after
//     the last run); 9,001 tokens x 16 heads x 4 groups: the same with runs of 16 (9 after);
//    4,000 tokens: 256,000 items, one group and both sides a thread (cases 0..31: f32 and a
//     fused QKV input too); 9,001 tokens x 3 heads x 8 groups = 216,024 items: the same, with
//     blocks of 64 items that start and end inside tokens (a block's bulk prefetch: one run
//     dense, one a token for the fused QKV views, cases 24..31);
//    2,000 tokens: 128,000 items, the same streaming (L2 prefetch, evict-first loads; cases
//     0..31).
// The random cases above are small: one side a thread, streaming. The first case of each
// size also runs with the cache pointer moved by 8 bytes (8-byte data stores instead of 16) and by
// 1 (byte stores; the pair's 2-byte scale store must fall back to two byte stores).
TEST(GpuWriterParity, LargeWritesMatchReferenceByteForByte) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(20261203);
  for (const auto& [shape, cases] :
       {std::pair{CaseShape{8, 128, 16, 12003}, 16}, std::pair{CaseShape{16, 64, 16, 9001}, 8},
        std::pair{CaseShape{8, 128, 16, 4000}, 32}, std::pair{CaseShape{3, 128, 16, 9001}, 32},
        std::pair{CaseShape{8, 128, 16, 2000}, 32}}) {
    for (int i = 0; i < cases; ++i) {
      const WriteCase c = random_case(rng, i, &shape);
      for (size_t offset : {size_t{0}, size_t{8}, size_t{1}}) {
        if (offset != 0 && i != 0) break;
        SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe() + ", cache pointer + " +
                     std::to_string(offset));
        ASSERT_EQ(write_differs_from_reference(c, 2000 + i, offset), "");
      }
    }
  }
}

}  // namespace
}  // namespace kvq::cuda::test
