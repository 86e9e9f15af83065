#pragma once
// Test helpers for the reference CPU backend. Nothing here calls the layouts library: offsets are
// the format doc's formulas written out again, so the tests check the code, not themselves.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "guard_bands.h"
#include "kvq/core/registry.h"
#include "kvq/core/tensor_view.h"

namespace kvq::test {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> bf16, round to nearest even (NaN kept NaN).
inline uint16_t to_bf16(float f) {
  uint32_t u = bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t h) {
  return from_bits(static_cast<uint32_t>(h) << 16);
}

// float -> f16 for values that f16 holds exactly (normal range, zero, inf, NaN); the tests only
// feed such values and check the round trip.
inline uint16_t to_f16_exact(float f) {
  const uint32_t u = bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (mag == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (mag == 0) return sign;
  const int exp = static_cast<int>(mag >> 23) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((mag >> 13) & 0x3FFu));
}
inline float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) return from_bits(sign | bits(static_cast<float>(m) * std::ldexp(1.0f, -24)));
  return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

// Input rows of one dtype built from float values.
struct Rows {
  DType dtype;
  std::vector<uint8_t> bytes;
  Rows(DType t, const std::vector<float>& values) : dtype(t) {
    const size_t n = values.size();
    bytes.resize(n * static_cast<size_t>(dtype_size(t)));
    for (size_t i = 0; i < n; ++i) {
      if (t == DType::f32) {
        std::memcpy(&bytes[4 * i], &values[i], 4);
      } else {
        const uint16_t h = t == DType::bf16 ? to_bf16(values[i]) : to_f16_exact(values[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
    }
  }
  TensorView view(int64_t T, int64_t H, int64_t D) {
    return make_view(bytes.data(), dtype, {T, H, D});
  }
};

// The format doc's page, written out by hand (docs/format.md, "The page").
struct HandLayout {
  int64_t T, H, D;  // block_size, num_kv_heads, head_size
  bool nhd;
  bool swizzled[2];  // K, V scale arrangement is sm100_swizzled

  int64_t S() const { return D / 16; }
  int64_t side_bytes() const { return H * T * D / 2 + H * T * S(); }
  int64_t page_bytes() const { return 2 * side_bytes(); }
  int64_t data(int side, int64_t t, int64_t h, int64_t g) const {
    const int64_t row = nhd ? t * H * (D / 2) + h * (D / 2) : h * T * (D / 2) + t * (D / 2);
    return side * side_bytes() + row + 8 * g;
  }
  int64_t scale(int side, int64_t t, int64_t h, int64_t s) const {
    int64_t tp = t, sp = s;
    if (swizzled[side]) {
      const int64_t g = S() / 4;
      tp = (t / 4) * 4 + s / g;
      sp = (s % g) * 4 + t % 4;
    }
    const int64_t at = nhd ? tp * H * S() + h * S() + sp : h * T * S() + tp * S() + sp;
    return side * side_bytes() + H * T * D / 2 + at;
  }
};

inline BackendOptions options_for(int64_t num_blocks, int64_t block_size, int64_t heads,
                                  int64_t head_size, const std::string& order = "HND",
                                  const std::string& k_scales = "linear",
                                  const std::string& v_scales = "sm100_swizzled",
                                  int32_t threads = 0) {
  BackendOptions o;
  o.cache.num_blocks = num_blocks;
  o.cache.block_size = block_size;
  o.cache.num_kv_heads = heads;
  o.cache.head_size = head_size;
  o.cache.layout = {order, k_scales, v_scales};
  o.threads = threads;
  return o;
}

// A cache of `size` bytes inside a larger allocation, with guard bands of a fixed pattern before
// and after it: [kGuardBytes | cache | kGuardBytes]. The writer gets a view of the middle only,
// so a write that strays outside the cache (a negative or past-the-end slot, a wrong page
// offset) lands in a guard instead of unowned heap, and guard_damage() reports it.
class GuardedCache {
 public:
  static constexpr size_t kGuardBytes = 4096;

  GuardedCache(size_t size, uint8_t fill) : all_(size + 2 * kGuardBytes, fill), size_(size) {
    for (size_t i = 0; i < kGuardBytes; ++i) all_[i] = all_[kGuardBytes + size + i] = guard(i);
  }
  uint8_t* data() { return all_.data() + kGuardBytes; }
  size_t size() const { return size_; }
  TensorView view(int64_t num_blocks, int64_t page_bytes) {
    page_bytes_ = static_cast<size_t>(page_bytes);  // for guard_damage()'s page numbers
    return make_view(data(), DType::u8, {num_blocks, page_bytes});
  }
  // The cache's bytes, without the guards.
  std::vector<uint8_t> contents() const {
    const auto begin = all_.begin() + static_cast<std::ptrdiff_t>(kGuardBytes);
    return {begin, begin + static_cast<std::ptrdiff_t>(size_)};
  }
  // "" when both guards still hold their pattern, else what changed (guard_band_changes: cache
  // byte positions, negative before the cache).
  std::string guard_damage() const {
    std::vector<uint8_t> want(kGuardBytes);
    for (size_t i = 0; i < kGuardBytes; ++i) want[i] = guard(i);
    const std::span<const uint8_t> all(all_);
    return guard_band_changes(want, all.first(kGuardBytes), want, all.last(kGuardBytes), size_,
                              page_bytes_);
  }

 private:
  static uint8_t guard(size_t i) { return static_cast<uint8_t>(0x5A ^ (i * 13)); }
  std::vector<uint8_t> all_;
  size_t size_;
  size_t page_bytes_ = 1;
};

// ||a - b|| / ||a||
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

}  // namespace kvq::test
