#pragma once
// Decode attention with grouped query heads (GQA), in f32 on the host: what an attention kernel
// computes for one new token, used to measure what quantizing the cache costs downstream.
#include <cstdint>

namespace kvq::demo {

struct AttentionShape {
  int64_t tokens = 0;        // T: cached tokens of the sequence
  int64_t num_kv_heads = 0;  // H
  int64_t head_size = 0;     // D
  int64_t group = 1;         // query heads per KV head
};

// out[j] = sum_t softmax_t(q[j] . k[t, j / group] / sqrt(D)) * v[t, j / group]
//   q   [H * group, D]
//   k,v [T, H, D]
//   out [H * group, D]
// The softmax subtracts the row maximum first; sums accumulate in double.
void gqa_decode_attention(const AttentionShape& shape, const float* q, const float* k,
                          const float* v, float* out);

// Accumulates how far `test` is from `ref` over any number of calls.
class ErrorStats {
 public:
  void add(const float* ref, const float* test, int64_t n);
  // ||test - ref|| / ||ref|| (0 when ref is all zeros and test equals it).
  double rel_l2() const;
  // test . ref / (||test|| ||ref||); 1 when both are all zeros.
  double cosine() const;
  int64_t count() const { return count_; }

 private:
  double diff2_ = 0, ref2_ = 0, test2_ = 0, dot_ = 0;
  int64_t count_ = 0;
};

}  // namespace kvq::demo
