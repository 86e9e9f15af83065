#pragma once
// Seeded, counter-based random numbers: the same (seed, key...) gives the same numbers on every
// machine and in any order of calls, so K/V rows depend only on (seed, sequence, position) and
// not on which batch wrote them (what lets N head-sharded writers see identical inputs).
// SplitMix64 (Steele, Lea, Flood 2014) for mixing; Marsaglia's polar method for normals (no
// trigonometry: a fifth of the demo's time went to sincos with Box-Muller).
#include <cmath>
#include <cstdint>

namespace kvq::demo {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One key from several words (order matters).
constexpr uint64_t mix(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b));
}
constexpr uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  return mix(mix(a, b), c);
}
constexpr uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return mix(mix(a, b, c), d);
}

// A stream of numbers from one key.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): 53 random bits, never 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (the modulo bias is below 2^-40 for the ranges used here).
  int64_t integer(int64_t lo, int64_t hi) {
    const auto span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(next() % span);
  }
  // Two independent standard normals: a point uniform in the unit disc (by rejection, 1.27
  // tries on average), scaled.
  void normal2(float* a, float* b) {
    double u = 0, v = 0, s = 0;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * std::log(s) / s);
    *a = static_cast<float>(u * f);
    *b = static_cast<float>(v * f);
  }
  float normal() {
    float a = 0, b = 0;
    normal2(&a, &b);
    return a;
  }

 private:
  uint64_t state_;
};

}  // namespace kvq::demo
