#pragma once
// A non-owning strided view of a tensor in host or device memory: what every writer and reader
// takes. Strides are in elements (like PyTorch and DLPack), not bytes.
#include <dlpack/dlpack.h>  // DLTensor (libdlpack-dev)

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvq/core/dtype.h"
#include "kvq/core/export.h"

namespace kvq {

enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int32_t index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int32_t i) { return {DeviceType::cuda, i}; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu" or "cuda:N".
KVQ_API std::string to_string(Device d);

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  int32_t ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements
  Device device{};

  // Indices are size_t inside: these inline bodies compile in engines built with -Wconversion.
  int64_t numel() const {
    int64_t n = 1;
    for (size_t i = 0; i < dims(); ++i) n *= shape[i];
    return n;
  }
  int64_t size(int i) const { return shape[static_cast<size_t>(i)]; }
  int64_t stride(int i) const { return strides[static_cast<size_t>(i)]; }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (size_t i = dims(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  size_t dims() const { return ndim > 0 ? static_cast<size_t>(ndim) : 0; }
  // "[4, 8, 128] bf16 cuda:0"
  KVQ_API std::string describe() const;

  // The bytes the view can touch, [first, one past the last) ({0, 0} with no elements), for
  // non-negative strides. Pointer arithmetic only: fine for device views too. A view whose reach
  // overflows 64 bits gets {0, UINTPTR_MAX}: it may touch anything, so it shares memory with
  // every other view (share_memory) and cannot slip past that check by wrapping around.
  KVQ_API std::pair<uintptr_t, uintptr_t> byte_range() const;
  // Whether two of its elements may share memory, for non-negative strides: a 0 stride on a
  // dimension of size > 1, or a stride that does not step past everything the smaller strides
  // reach. Conservative (an exotic interleaving that never collides is refused too). An output
  // view with overlapping elements would be written twice, in any order.
  KVQ_API bool elements_overlap() const;
};

// Whether the byte ranges of two non-empty views intersect: a buffer written while the other is
// read. Conservative for strided views that interleave within one allocation.
KVQ_API bool share_memory(const TensorView& a, const TensorView& b);

// A contiguous view of `data` with the given shape.
KVQ_API TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                             Device device = Device::cpu());

// From DLPack (v0.6+): maps kDLBfloat16, kDLFloat 16/32, kDLUInt 8, kDLInt 32/64 with one lane
// and devices kDLCPU / kDLCUDA (and kDLCUDAHost as cpu). NULL strides mean compact row-major. Any
// other dtype, device, lane count or more than kMaxDims dimensions throws kvq::Error naming it.
// byte_offset is folded into `data`.
KVQ_API TensorView from_dlpack(const DLTensor& t);

}  // namespace kvq
