#pragma once
// The paged cache's free list: which of the cache's num_blocks pages are free. A block freed last
// is handed out first (a stack), as engines' allocators do: a sequence admitted after another one
// finished lands in the pages that one gave back, so stale bytes in reused pages are a real case
// the demo exercises, not a hypothetical one.
#include <cstdint>
#include <vector>

namespace kvq::demo {

class BlockAllocator {
 public:
  // Blocks 0..num_blocks-1, all free; the first allocations return 0, 1, 2, ...
  explicit BlockAllocator(int64_t num_blocks);

  // Takes a free block. Throws kvq::Error (runtime) "all N blocks are in use" when none is free.
  int64_t allocate();
  // Gives a block back. Throws kvq::Error (invalid_argument) for a block outside [0, num_blocks)
  // or one that is not allocated (a double free); the free list is unchanged then.
  void release(int64_t block);

  bool is_allocated(int64_t block) const;
  int64_t num_blocks() const { return static_cast<int64_t>(allocated_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  int64_t peak_used() const { return peak_used_; }     // most blocks in use at once
  int64_t reused() const { return reused_; }           // allocations that got a freed block
  int64_t distinct_used() const { return distinct_; }  // blocks ever allocated

 private:
  std::vector<int64_t> free_;       // a stack: back() is handed out next
  std::vector<uint8_t> allocated_;  // [num_blocks] 1 = in use
  std::vector<uint8_t> ever_used_;  // [num_blocks] 1 = allocated at least once
  int64_t peak_used_ = 0;
  int64_t reused_ = 0;
  int64_t distinct_ = 0;
};

}  // namespace kvq::demo
