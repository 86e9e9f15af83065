// BlockAllocator: the free list a paged cache lives on.
#include "block_allocator.h"

#include <gtest/gtest.h>

#include "kvq/core/status.h"

namespace kvq::demo {
namespace {

TEST(BlockAllocator, HandsOutBlocksInOrderFromAFreshCache) {
  BlockAllocator a(4);
  EXPECT_EQ(a.num_free(), 4);
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_EQ(a.num_used(), 3);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_TRUE(a.is_allocated(2));
  EXPECT_FALSE(a.is_allocated(3));
}

TEST(BlockAllocator, ReusesTheLastFreedBlockFirst) {
  BlockAllocator a(8);
  for (int i = 0; i < 5; ++i) a.allocate();
  a.release(1);
  a.release(3);
  EXPECT_EQ(a.allocate(), 3);  // freed last
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 5);  // then fresh blocks
  EXPECT_EQ(a.reused(), 2);
  EXPECT_EQ(a.distinct_used(), 6);
  EXPECT_EQ(a.peak_used(), 6);
}

TEST(BlockAllocator, ExhaustionIsAnErrorThatChangesNothing) {
  BlockAllocator a(2);
  a.allocate();
  a.allocate();
  try {
    a.allocate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::runtime);
    EXPECT_STREQ(e.what(), "block allocator: all 2 blocks are in use");
  }
  EXPECT_EQ(a.num_used(), 2);
  a.release(0);
  EXPECT_EQ(a.allocate(), 0);
}

TEST(BlockAllocator, RefusesADoubleFreeAndForeignBlocks) {
  BlockAllocator a(3);
  const int64_t b = a.allocate();
  a.release(b);
  try {
    a.release(b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_STREQ(e.what(),
                 "block allocator: release(0): the block is not allocated (double free?)");
  }
  EXPECT_EQ(a.num_free(), 3);         // the double free did not push 0 twice
  EXPECT_THROW(a.release(2), Error);  // never allocated
  try {
    a.release(3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "block allocator: release(3): expected a block in [0, 3)");
  }
  EXPECT_THROW(a.release(-1), Error);
  // Every block still comes out exactly once.
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_THROW(a.allocate(), Error);
}

TEST(BlockAllocator, EmptyCacheIsExhaustedAtOnce) {
  BlockAllocator a(0);
  EXPECT_THROW(a.allocate(), Error);
  EXPECT_THROW(BlockAllocator(-1), Error);
}

}  // namespace
}  // namespace kvq::demo
