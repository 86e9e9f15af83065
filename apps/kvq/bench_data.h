#pragma once
// The inputs `kvq bench` writes: random bf16 rows (never zeros) and a slot mapping with pages in
// random order and 5% padding slots, as an engine's batch has.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvq::app::bench {

inline constexpr int64_t kPaddingPercent = 5;

struct SlotPlan {
  std::vector<int64_t> slots;  // [tokens]; -1 = padding
  int64_t valid_tokens = 0;    // slots >= 0
  int64_t num_blocks = 0;      // pages the valid tokens fill (at least 1)
};

// floor(tokens * kPaddingPercent / 100) for any tokens >= 0, without the product overflowing.
int64_t padding_tokens(int64_t tokens);

// padding_tokens(tokens) padding slots at random positions; the valid tokens fill pages in order
// (token i of the batch goes to offset i % block_size), the pages in a random permutation of
// [0, num_blocks). Deterministic for a seed.
SlotPlan make_slot_plan(int64_t tokens, int64_t block_size, uint64_t seed);

// Random bf16 bit patterns with magnitudes in [2^-6, 2^2) and random signs: never zero, never
// Inf/NaN, every mantissa bit exercised.
void fill_random_bf16(uint16_t* out, std::size_t count, uint64_t seed);

// Random bytes for a cache page, except that no byte is 0x7F or 0xFF (NaN as an E4M3 scale), so
// that a reader timed on pages no write touched dequantizes ordinary numbers.
void fill_random_page_bytes(uint8_t* out, std::size_t count, uint64_t seed);

}  // namespace kvq::app::bench
