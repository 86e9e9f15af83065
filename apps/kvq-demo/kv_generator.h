#pragma once
// Seeded K/V rows with the structure real models' caches show, so the demo's error numbers mean
// something (i.i.d. Gaussians flatter a block quantizer; real keys do not):
//
// - Keys have a per-head mean that persists across tokens, and a few channels of large magnitude
//   (2 rotary pairs per head, about 10x the others): "massive" key channels, stable per head,
//   which set their 16-element group's scale and so cost the small elements beside them precision.
// - Keys are rotary-encoded: channel i and i + D/2 form a pair ("rotate half", as GPT-NeoX and
//   Llama do) rotated by position * 10000^(-2i/D). The large channels sit in low-frequency pairs,
//   as observed in models (their angle changes slowly, so they stay large).
// - Values are milder: no outliers; a per-head mean (like the keys', 0.5 * N(0, 1) per channel)
//   plus Gaussians with a per-channel spread in [0.5, 1].
// - Queries are N(0, 1) per channel, rotary-encoded at the position they are asked at.
//
// How much the attention error depends on this: key errors perturb the logits by about
// k_rel_error * rms(k) * rms(q). With zero-mean values every output is a small average and that
// perturbation shows fully (attention cosine about 0.977 at rms(q) = 1); with the value mean above,
// about 0.998. Real values do carry such a mean (biases, attention sinks). apps/kvq-demo/README.md
// has the measurements.
//
// Every value is bf16-representable: rows are what an engine hands kvq (bf16), and the f32 copy is
// exact. Rows depend only on (seed, sequence, position), never on the batch that writes them.
#include <cstdint>
#include <vector>

namespace kvq::demo {

// bf16 from a float by round to nearest even (NaN stays NaN); and the float a bf16 holds.
uint16_t bf16_from_float(float f);
float bf16_to_float(uint16_t b);

class KvGenerator {
 public:
  // Throws kvq::Error (invalid_argument) unless num_kv_heads >= 1 and head_size is even and >= 2.
  KvGenerator(uint64_t seed, int64_t num_kv_heads, int64_t head_size);

  // Rows of tokens [first, first + count) of `sequence`: key and value [count, H, D] f32.
  void rows(int64_t sequence, int64_t first, int64_t count, float* key, float* value) const;

  // The decode queries for `sequence` at `position` (the token after its last): [H * group, D];
  // query head j attends with KV head j / group. Rotary-encoded like the keys.
  void queries(int64_t sequence, int64_t position, int64_t group, float* q) const;

  int64_t num_kv_heads() const { return heads_; }
  int64_t head_size() const { return dim_; }
  // The channels of head h with large magnitude (both channels of each large pair), ascending.
  std::vector<int64_t> large_channels(int64_t head) const;

  static constexpr int kLargePairsPerHead = 2;
  static constexpr float kLargeMagnitude = 10.0f;

 private:
  // cos_sin [D/2, 2]: cos and sin of position * inv_freq_[i].
  void angles(int64_t position, float* cos_sin) const;
  // Rotates pairs (i, i + D/2) of a [D] row by the angles.
  void rotate(const float* cos_sin, float* row) const;

  uint64_t seed_;
  int64_t heads_;
  int64_t dim_;
  std::vector<float> inv_freq_;       // [D/2]
  std::vector<float> key_mean_;       // [H, D] before rotation
  std::vector<float> key_spread_;     // [H, D]
  std::vector<float> value_spread_;   // [H, D]
  std::vector<float> value_mean_;     // [H, D]
  std::vector<int64_t> large_pairs_;  // [H, kLargePairsPerHead] pair index i (channels i, i + D/2)
};

}  // namespace kvq::demo
