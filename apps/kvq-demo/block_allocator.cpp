#include "block_allocator.h"

#include <fmt/format.h>

#include "kvq/core/status.h"

namespace kvq::demo {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  if (num_blocks < 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("block allocator: num_blocks = {}: expected >= 0", num_blocks));
  }
  const auto n = static_cast<std::size_t>(num_blocks);
  allocated_.assign(n, 0);
  ever_used_.assign(n, 0);
  free_.reserve(n);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // 0 on top
}

int64_t BlockAllocator::allocate() {
  if (free_.empty()) {
    throw Error(ErrorCode::runtime,
                fmt::format("block allocator: all {} blocks are in use", num_blocks()));
  }
  const int64_t b = free_.back();
  free_.pop_back();
  allocated_[static_cast<std::size_t>(b)] = 1;
  if (ever_used_[static_cast<std::size_t>(b)]) {
    ++reused_;
  } else {
    ever_used_[static_cast<std::size_t>(b)] = 1;
    ++distinct_;
  }
  if (num_used() > peak_used_) peak_used_ = num_used();
  return b;
}

void BlockAllocator::release(int64_t block) {
  if (block < 0 || block >= num_blocks()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("block allocator: release({}): expected a block in [0, {})", block,
                            num_blocks()));
  }
  if (!allocated_[static_cast<std::size_t>(block)]) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("block allocator: release({}): the block is not allocated "
                            "(double free?)",
                            block));
  }
  allocated_[static_cast<std::size_t>(block)] = 0;
  free_.push_back(block);
}

bool BlockAllocator::is_allocated(int64_t block) const {
  return block >= 0 && block < num_blocks() && allocated_[static_cast<std::size_t>(block)] != 0;
}

}  // namespace kvq::demo
