#include "kv_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "kvq/core/status.h"
#include "random.h"

namespace kvq::demo {

uint16_t bf16_from_float(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFF + ((u >> 16) & 1);                                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

namespace {

float bf16_round(float f) {
  return bf16_to_float(bf16_from_float(f));
}

// Salts that keep the streams of different uses apart.
constexpr uint64_t kProfileSalt = 0x70726f66;  // "prof"
constexpr uint64_t kRowSalt = 0x726f7773;      // "rows"
constexpr uint64_t kQuerySalt = 0x71756572;    // "quer"

}  // namespace

KvGenerator::KvGenerator(uint64_t seed, int64_t num_kv_heads, int64_t head_size)
    : seed_(seed), heads_(num_kv_heads), dim_(head_size) {
  if (num_kv_heads < 1 || head_size < 2 || head_size % 2 != 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kv generator: num_kv_heads = {}, head_size = {}: expected >= 1 heads "
                            "and an even head_size >= 2",
                            num_kv_heads, head_size));
  }
  const int64_t half = dim_ / 2;
  inv_freq_.resize(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq_[static_cast<std::size_t>(i)] = static_cast<float>(
        std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(dim_)));
  }
  const auto n = static_cast<std::size_t>(heads_ * dim_);
  key_mean_.resize(n);
  key_spread_.resize(n);
  value_spread_.resize(n);
  value_mean_.resize(n);
  large_pairs_.resize(static_cast<std::size_t>(heads_ * kLargePairsPerHead));
  for (int64_t h = 0; h < heads_; ++h) {
    Rng rng(mix(seed_, kProfileSalt, static_cast<uint64_t>(h)));
    for (int64_t c = 0; c < dim_; ++c) {
      const auto i = static_cast<std::size_t>(h * dim_ + c);
      key_mean_[i] = 0.5f * rng.normal();
      key_spread_[i] = 0.6f + 0.4f * static_cast<float>(rng.uniform());
      value_spread_[i] = 0.5f + 0.5f * static_cast<float>(rng.uniform());
      value_mean_[i] = 0.5f * rng.normal();
    }
    // Large pairs among the low-frequency half of the pairs, distinct.
    int64_t* pairs = &large_pairs_[static_cast<std::size_t>(h * kLargePairsPerHead)];
    for (int k = 0; k < kLargePairsPerHead; ++k) {
      int64_t p = 0;
      bool fresh = false;
      while (!fresh) {
        p = half / 2 + rng.integer(0, half - half / 2 - 1);
        fresh = std::find(pairs, pairs + k, p) == pairs + k;
        fresh = fresh || half - half / 2 < kLargePairsPerHead;  // tiny heads: allow repeats
      }
      pairs[k] = p;
      for (int64_t c : {p, p + half}) {
        const auto i = static_cast<std::size_t>(h * dim_ + c);
        const float sign = rng.uniform() < 0.5 ? -1.0f : 1.0f;
        key_mean_[i] = sign * kLargeMagnitude;
        key_spread_[i] = 1.0f;
      }
    }
  }
}

std::vector<int64_t> KvGenerator::large_channels(int64_t head) const {
  std::vector<int64_t> out;
  for (int k = 0; k < kLargePairsPerHead; ++k) {
    const int64_t p = large_pairs_[static_cast<std::size_t>(head * kLargePairsPerHead + k)];
    out.push_back(p);
    out.push_back(p + dim_ / 2);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void KvGenerator::angles(int64_t position, float* cos_sin) const {
  const int64_t half = dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq_[static_cast<std::size_t>(i)];
    cos_sin[2 * i] = static_cast<float>(std::cos(angle));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle));
  }
}

void KvGenerator::rotate(const float* cos_sin, float* row) const {
  const int64_t half = dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x = row[i];
    const float y = row[i + half];
    row[i] = x * c - y * s;
    row[i + half] = x * s + y * c;
  }
}

void KvGenerator::rows(int64_t sequence, int64_t first, int64_t count, float* key,
                       float* value) const {
  std::vector<float> cos_sin(static_cast<std::size_t>(dim_));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t position = first + t;
    angles(position, cos_sin.data());
    Rng rng(mix(seed_, kRowSalt, static_cast<uint64_t>(sequence), static_cast<uint64_t>(position)));
    for (int64_t h = 0; h < heads_; ++h) {
      float* k = key + (t * heads_ + h) * dim_;
      float* v = value + (t * heads_ + h) * dim_;
      const std::size_t base = static_cast<std::size_t>(h * dim_);
      for (int64_t c = 0; c < dim_; c += 2) {
        float a = 0, b = 0;
        rng.normal2(&a, &b);
        k[c] = key_mean_[base + c] + key_spread_[base + c] * a;
        k[c + 1] = key_mean_[base + c + 1] + key_spread_[base + c + 1] * b;
      }
      rotate(cos_sin.data(), k);
      for (int64_t c = 0; c < dim_; c += 2) {
        float a = 0, b = 0;
        rng.normal2(&a, &b);
        v[c] = value_mean_[base + c] + value_spread_[base + c] * a;
        v[c + 1] = value_mean_[base + c + 1] + value_spread_[base + c + 1] * b;
      }
      for (int64_t c = 0; c < dim_; ++c) {
        k[c] = bf16_round(k[c]);
        v[c] = bf16_round(v[c]);
      }
    }
  }
}

void KvGenerator::queries(int64_t sequence, int64_t position, int64_t group, float* q) const {
  Rng rng(mix(seed_, kQuerySalt, static_cast<uint64_t>(sequence), static_cast<uint64_t>(position)));
  std::vector<float> cos_sin(static_cast<std::size_t>(dim_));
  angles(position, cos_sin.data());
  for (int64_t j = 0; j < heads_ * group; ++j) {
    float* row = q + j * dim_;
    for (int64_t c = 0; c < dim_; c += 2) rng.normal2(&row[c], &row[c + 1]);
    rotate(cos_sin.data(), row);
    for (int64_t c = 0; c < dim_; ++c) row[c] = bf16_round(row[c]);
  }
}

}  // namespace kvq::demo
