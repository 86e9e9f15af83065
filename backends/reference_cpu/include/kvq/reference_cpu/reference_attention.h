#pragma once
// The reference decode attention, the definition the GPU kernels are measured against: every K
// and V element dequantized as the reference reader does (nvfp4_dequantize, ElementCodec::decode,
// then times the side's scale), the query converted exactly, scores, softmax and the weighted sum
// of V in f64; the result rounded to f32, then to the output dtype.
//
//   out[s, q, :] = sum_j p_j V[j, kv, :] / sum_j p_j,   p_j = exp(x_j - max x),
//   x_j = softmax_scale * sum_d Q[s, q, d] K[j, kv, d],  j < seq_lens[s],  kv = q / (Hq / H)
//
// A sequence of length 0 gives zeros. Host memory only (the contract refuses block ids and
// seq_lens out of range before anything is computed).
#include "kvq/abi/plugin.h"
#include "kvq/core/attention.h"
#include "kvq/core/registry.h"

namespace kvq::reference_cpu {

// What the reference attention needs beyond the contract: host memory, bf16 or f16 queries,
// per-head scales.
const kvq_requirements& attention_requirements();

class ReferenceAttention final : public KVCacheAttention {
 public:
  explicit ReferenceAttention(const BackendOptions& options);  // throws like ReferenceWriter
  ReferenceAttention(const PageLayout& layout, int threads);

  // Checks the contract, then attend_checked().
  Status attend(const AttentionArgs& args) noexcept override;
  // The attention of arguments the contract has passed (softmax_scale already resolved).
  Status attend_checked(const AttentionArgs& args) noexcept;
  // Always 0: the reference works in host memory and needs no scratch.
  Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks_per_seq,
                         uint64_t* bytes) const noexcept override;
  Status take_out_of_range(AttentionOutOfRange* counts) noexcept override;
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return Device::cpu(); }

 private:
  PageLayout layout_;
  int threads_;
};

}  // namespace kvq::reference_cpu
