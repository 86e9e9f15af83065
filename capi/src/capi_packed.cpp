#include "capi_packed.h"

#include <fmt/format.h>

#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq::capi {

void PackedTensors::unpack(const int64_t* words, int64_t count, const char* function) {
  const auto bad = [&](const std::string& what) {
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: {}", function, what));
  };
  if (words == nullptr) bad("words is NULL");
  int64_t at = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (count - at < kHeaderWords) {
      bad(fmt::format("tensor {} ends at word {} of {}: expected {} header words", i, count, count,
                      kHeaderWords));
    }
    const int64_t* w = words + at;
    const int64_t ndim = w[5];
    if (ndim < 0 || ndim > TensorView::kMaxDims) {
      bad(fmt::format("tensor {} has ndim {}: expected 0..{}", i, ndim, TensorView::kMaxDims));
    }
    if (count - at < kHeaderWords + 2 * ndim) {
      bad(fmt::format("tensor {} needs {} words from word {}, {} are left", i,
                      kHeaderWords + 2 * ndim, at, count - at));
    }
    if (w[3] < 0 || w[3] > 255 || w[4] < 0 || w[4] > 255 || w[2] < INT32_MIN || w[2] > INT32_MAX ||
        w[1] < INT32_MIN || w[1] > INT32_MAX) {
      bad(fmt::format("tensor {}: device ({}, {}) or dtype ({}, {} bits) out of DLPack's range", i,
                      w[1], w[2], w[3], w[4]));
    }
    DLTensor& t = tensors_[i];
    t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(w[0]));
    t.device = {static_cast<DLDeviceType>(w[1]), static_cast<int32_t>(w[2])};
    t.ndim = static_cast<int32_t>(ndim);
    t.dtype = {static_cast<uint8_t>(w[3]), static_cast<uint8_t>(w[4]), 1};
    t.shape = const_cast<int64_t*>(w + kHeaderWords);
    t.strides = const_cast<int64_t*>(w + kHeaderWords + ndim);
    t.byte_offset = 0;
    at += kHeaderWords + 2 * ndim;
  }
  if (at != count) bad(fmt::format("{} words after the four tensors: expected none", count - at));
}

}  // namespace kvq::capi
