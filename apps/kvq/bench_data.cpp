#include "bench_data.h"

#include <algorithm>
#include <numeric>

namespace kvq::app::bench {
namespace {

// splitmix64: fast, good enough for benchmark inputs, identical on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return (*this)() % n; }
};

uint16_t bf16_from_bits(uint64_t r) {
  // sign | biased exponent 121..128 (2^-6 .. 2^1, magnitudes below 4) | 7 mantissa bits
  const auto sign = static_cast<uint16_t>((r >> 15) & 1u);
  const auto exponent = static_cast<uint16_t>(121u + ((r >> 7) & 7u));
  const auto mantissa = static_cast<uint16_t>(r & 0x7Fu);
  return static_cast<uint16_t>((sign << 15) | (exponent << 7) | mantissa);
}

}  // namespace

int64_t padding_tokens(int64_t tokens) {
  // tokens = 100 q + r: floor(tokens * p / 100) = q p + floor(r p / 100), and q p <= tokens.
  return tokens / 100 * kPaddingPercent + tokens % 100 * kPaddingPercent / 100;
}

SlotPlan make_slot_plan(int64_t tokens, int64_t block_size, uint64_t seed) {
  SplitMix64 rng{seed};
  SlotPlan plan;
  const int64_t padding = padding_tokens(tokens);
  plan.valid_tokens = tokens - padding;
  plan.num_blocks = std::max<int64_t>(1, (plan.valid_tokens + block_size - 1) / block_size);

  std::vector<int64_t> pages(static_cast<std::size_t>(plan.num_blocks));
  std::iota(pages.begin(), pages.end(), int64_t{0});
  for (std::size_t i = pages.size(); i > 1; --i) std::swap(pages[i - 1], pages[rng.below(i)]);

  // Choose the padding positions: a random `padding`-subset of [0, tokens).
  std::vector<char> is_pad(static_cast<std::size_t>(tokens), 0);
  std::vector<int64_t> order(static_cast<std::size_t>(tokens));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = 0; i < padding; ++i) {
    const auto j = static_cast<std::size_t>(i) + rng.below(static_cast<uint64_t>(tokens - i));
    std::swap(order[static_cast<std::size_t>(i)], order[j]);
    is_pad[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
  }

  plan.slots.resize(static_cast<std::size_t>(tokens));
  int64_t next = 0;  // index among valid tokens
  for (int64_t t = 0; t < tokens; ++t) {
    auto& slot = plan.slots[static_cast<std::size_t>(t)];
    if (is_pad[static_cast<std::size_t>(t)]) {
      slot = -1;
      continue;
    }
    slot = pages[static_cast<std::size_t>(next / block_size)] * block_size + next % block_size;
    ++next;
  }
  return plan;
}

void fill_random_bf16(uint16_t* out, std::size_t count, uint64_t seed) {
  SplitMix64 rng{seed};
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {  // four 16-bit draws per 64-bit number
    const uint64_t r = rng();
    out[i] = bf16_from_bits(r);
    out[i + 1] = bf16_from_bits(r >> 16);
    out[i + 2] = bf16_from_bits(r >> 32);
    out[i + 3] = bf16_from_bits(r >> 48);
  }
  for (; i < count; ++i) out[i] = bf16_from_bits(rng());
}

void fill_random_page_bytes(uint8_t* out, std::size_t count, uint64_t seed) {
  SplitMix64 rng{seed};
  for (std::size_t i = 0; i < count; i += 8) {
    uint64_t r = rng();
    for (std::size_t k = 0; k < 8 && i + k < count; ++k, r >>= 8) {
      auto b = static_cast<uint8_t>(r);
      if ((b & 0x7F) == 0x7F) b = static_cast<uint8_t>(b ^ 1u);
      out[i + k] = b;
    }
  }
}

}  // namespace kvq::app::bench
