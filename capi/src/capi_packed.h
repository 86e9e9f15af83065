#pragma once
// Four tensors packed as int64 words (kvq_capi_writer_write_packed), unpacked into DLTensors
// whose shape and strides point into the words: no allocation on the write path.
#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>

namespace kvq::capi {

class PackedTensors {
 public:
  static constexpr int kTensors = 4;
  static constexpr int64_t kHeaderWords = 6;  // data, device_type, device_id, code, bits, ndim

  // Throws kvq::Error (invalid_argument) naming `function` when the words do not hold exactly
  // four tensors of 0..4 dimensions.
  void unpack(const int64_t* words, int64_t count, const char* function);
  const DLTensor& operator[](int i) const { return tensors_[static_cast<size_t>(i)]; }

 private:
  std::array<DLTensor, kTensors> tensors_{};
};

}  // namespace kvq::capi
