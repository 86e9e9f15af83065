#include "attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kvq::demo {

void gqa_decode_attention(const AttentionShape& shape, const float* q, const float* k,
                          const float* v, float* out) {
  const int64_t T = shape.tokens, H = shape.num_kv_heads, D = shape.head_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> logits(static_cast<std::size_t>(T));
  std::vector<double> acc(static_cast<std::size_t>(D));
  for (int64_t j = 0; j < H * shape.group; ++j) {
    const int64_t h = j / shape.group;
    const float* qj = q + j * D;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < T; ++t) {
      const float* kt = k + (t * H + h) * D;
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) dot += static_cast<double>(qj[c]) * kt[c];
      const float l = static_cast<float>(dot) * scale;
      logits[static_cast<std::size_t>(t)] = l;
      max_logit = std::max(max_logit, l);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double denom = 0;
    for (int64_t t = 0; t < T; ++t) {
      const double p = std::exp(static_cast<double>(logits[static_cast<std::size_t>(t)]) -
                                static_cast<double>(max_logit));
      denom += p;
      const float* vt = v + (t * H + h) * D;
      for (int64_t c = 0; c < D; ++c) acc[static_cast<std::size_t>(c)] += p * vt[c];
    }
    float* oj = out + j * D;
    for (int64_t c = 0; c < D; ++c) {
      oj[c] = T > 0 ? static_cast<float>(acc[static_cast<std::size_t>(c)] / denom) : 0.0f;
    }
  }
}

void ErrorStats::add(const float* ref, const float* test, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], t = test[i];
    diff2_ += (t - r) * (t - r);
    ref2_ += r * r;
    test2_ += t * t;
    dot_ += r * t;
  }
  count_ += n;
}

double ErrorStats::rel_l2() const {
  if (ref2_ == 0) return diff2_ == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff2_ / ref2_);
}

double ErrorStats::cosine() const {
  if (ref2_ == 0 && test2_ == 0) return 1.0;
  if (ref2_ == 0 || test2_ == 0) return 0.0;
  return dot_ / std::sqrt(ref2_ * test2_);
}

}  // namespace kvq::demo
