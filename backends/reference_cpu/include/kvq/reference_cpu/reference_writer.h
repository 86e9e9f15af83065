#pragma once
// The reference CPU writer: docs/format.md in code, the bytes every other backend is compared
// with. A write is checked whole (the host contract, kvq/core/contract.h) before it touches the
// cache, then written whole, so a refused write leaves the cache bit-for-bit unchanged. Tokens
// are spread over worker threads; each token's bytes depend on that token alone, so the output
// is identical for any thread count.
//
// Slots: negative = padding (skipped); >= num_blocks * block_size is an error (out_of_range); the
// same slot twice in one write is an error too (which token should win is undefined on a GPU,
// and a definition in code must not leave it to thread timing).
#include <array>
#include <vector>

#include "kvq/abi/plugin.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/registry.h"

namespace kvq::reference_cpu {

// What reference_cpu needs beyond the contract: host memory, any strides, bf16 | f16 | f32; it
// takes per-head scales.
const kvq_requirements& requirements();

// Each side's scale per head ([2][num_kv_heads]): the per-head tensors where given (host f32,
// checked by the contract), else the side's one scale.
std::array<std::vector<float>, 2> side_scales(const PageLayout& layout, float k_scale,
                                              float v_scale, const TensorView& k_heads,
                                              const TensorView& v_heads);

class ReferenceWriter final : public KVCacheWriter {
 public:
  // Throws kvq::Error: invalid_argument for a CacheSpec the layout refuses, unavailable for a
  // device other than the CPU.
  explicit ReferenceWriter(const BackendOptions& options);
  ReferenceWriter(const PageLayout& layout, int threads);

  // Checks the contract, then write_checked().
  Status write(const WriteArgs& args) noexcept override;
  // The write of arguments the contract has passed (the plugin's path: the host checked).
  Status write_checked(const WriteArgs& args) noexcept;
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return Device::cpu(); }
  // Out-of-range slots are refused before writing, so nothing is ever skipped: always 0.
  Status take_out_of_range_slots(int64_t* count) noexcept override;

  int threads() const noexcept { return threads_; }  // resolved: >= 1

 private:
  PageLayout layout_;
  int threads_;
};

}  // namespace kvq::reference_cpu
