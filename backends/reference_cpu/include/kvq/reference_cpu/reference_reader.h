#pragma once
// The reference reader: dequantizes the K and V rows of given slots back to f32 with
// nvfp4_dequantize (the one definition every reader shares). A negative slot reads as zeros.
#include "kvq/core/kv_cache.h"
#include "kvq/core/registry.h"

namespace kvq::reference_cpu {

class ReferenceReader final : public KVCacheReader {
 public:
  explicit ReferenceReader(const BackendOptions& options);  // throws like ReferenceWriter
  ReferenceReader(const PageLayout& layout, int threads);

  // Checks the contract, then read_checked().
  Status read(const ReadArgs& args) noexcept override;
  Status read_checked(const ReadArgs& args) noexcept;
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return Device::cpu(); }

 private:
  PageLayout layout_;
  int threads_;
};

}  // namespace kvq::reference_cpu
