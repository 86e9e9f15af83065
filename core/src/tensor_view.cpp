#include "kvq/core/tensor_view.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <array>

#include "kvq/core/status.h"

namespace kvq {

std::string to_string(Device d) {
  return d.is_cuda() ? fmt::format("cuda:{}", d.index) : std::string("cpu");
}

std::string TensorView::describe() const {
  std::string dims;
  for (int i = 0; i < ndim; ++i) dims += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return fmt::format("[{}] {} {}", dims, dtype_name(dtype), to_string(device));
}

std::pair<uintptr_t, uintptr_t> TensorView::byte_range() const {
  if (numel() == 0 || data == nullptr) return {0, 0};
  // A reach past 64 bits would wrap below `data`: such a view may touch any byte.
  constexpr std::pair<uintptr_t, uintptr_t> kAnywhere{0, UINTPTR_MAX};
  int64_t last = 0;
  for (int d = 0; d < ndim; ++d) {
    int64_t step = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return kAnywhere;
    }
  }
  const auto begin = reinterpret_cast<uintptr_t>(data);
  uint64_t bytes = 0;
  uintptr_t end = 0;
  if (last < 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(last) + 1, dtype_size(dtype), &bytes) ||
      __builtin_add_overflow(begin, bytes, &end)) {
    return kAnywhere;
  }
  return {begin, end};
}

bool TensorView::elements_overlap() const {
  // Dimensions of size > 1 by stride: each stride must step past the last element the smaller
  // ones reach.
  std::array<std::pair<int64_t, int64_t>, kMaxDims> dims{};  // (stride, size)
  int n = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] <= 1) continue;
    // Insertion by stride (at most kMaxDims; std::sort trips GCC 12's -Warray-bounds here).
    int i = n++;
    for (; i > 0 && dims[static_cast<size_t>(i - 1)].first > strides[d]; --i) {
      dims[static_cast<size_t>(i)] = dims[static_cast<size_t>(i - 1)];
    }
    dims[static_cast<size_t>(i)] = {strides[d], shape[d]};
  }
  int64_t reach = 0;  // the largest offset the dimensions so far reach, in elements
  for (int i = 0; i < n; ++i) {
    const auto [stride, size] = dims[static_cast<size_t>(i)];
    int64_t step = 0;
    if (stride <= reach || __builtin_mul_overflow(stride, size - 1, &step) ||
        __builtin_add_overflow(reach, step, &reach)) {
      return true;  // past int64 offsets: no such view is valid anyway
    }
  }
  return false;
}

bool share_memory(const TensorView& a, const TensorView& b) {
  const auto [a0, a1] = a.byte_range();
  const auto [b0, b1] = b.byte_range();
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  if (shape.size() > TensorView::kMaxDims) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tensor has {} dimensions: at most {} supported", shape.size(),
                            TensorView::kMaxDims));
  }
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

namespace {

DType dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("DLPack tensor has {} lanes: expected 1", t.lanes));
  }
  switch (t.code) {
    case kDLBfloat:
      if (t.bits == 16) return DType::bf16;
      break;
    case kDLFloat:
      if (t.bits == 16) return DType::f16;
      if (t.bits == 32) return DType::f32;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::u8;
      break;
    case kDLInt:
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      break;
    default: break;
  }
  throw Error(ErrorCode::invalid_argument,
              fmt::format("DLPack dtype (code {}, {} bits) is not supported: expected bfloat16, "
                          "float16, float32, uint8, int32 or int64",
                          static_cast<int>(t.code), static_cast<int>(t.bits)));
}

Device device_from_dlpack(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost: return Device::cpu();
    case kDLCUDA:
      if (d.device_id < 0) {
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("DLPack CUDA device id {}: expected >= 0", d.device_id));
      }
      return Device::cuda(d.device_id);
    default:
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("DLPack device type {} is not supported: expected CPU, CUDA or "
                              "CUDA host memory",
                              static_cast<int>(d.device_type)));
  }
}

}  // namespace

TensorView from_dlpack(const DLTensor& t) {
  if (t.ndim < 0 || t.ndim > TensorView::kMaxDims) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("DLPack tensor has {} dimensions: expected 0..{}", t.ndim,
                            TensorView::kMaxDims));
  }
  TensorView v;
  v.dtype = dtype_from_dlpack(t.dtype);
  v.device = device_from_dlpack(t.device);
  v.ndim = t.ndim;
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("DLPack tensor has negative size {} in dimension {}", t.shape[d], d));
    }
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides ? t.strides[d] : stride;
    stride *= t.shape[d];
  }
  return v;
}

}  // namespace kvq
