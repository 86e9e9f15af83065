// Tensor views and the DLPack conversion: strides, dtype and device mapping, refusals.
#include "kvq/core/tensor_view.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvq/core/kv_cache.h"
#include "kvq/core/status.h"

namespace kvq {
namespace {

TEST(TensorView, MakeViewIsContiguousRowMajor) {
  float buf[2 * 3 * 4];
  TensorView v = make_view(buf, DType::f32, {2, 3, 4});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(1), 4);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.describe(), "[2, 3, 4] f32 cpu");
  EXPECT_THROW(make_view(buf, DType::f32, {1, 1, 1, 1, 1}), Error);
}

// kMaxDims (4) is a limit, not one past it: a 4-D view is built, with row-major strides.
TEST(TensorView, MakeViewTakesExactlyMaxDims) {
  float buf[2 * 3 * 4 * 5];
  const TensorView v = make_view(buf, DType::f32, {2, 3, 4, 5});
  EXPECT_EQ(v.ndim, TensorView::kMaxDims);
  EXPECT_EQ(v.stride(0), 60);
  EXPECT_EQ(v.stride(3), 1);
  EXPECT_EQ(v.describe(), "[2, 3, 4, 5] f32 cpu");
}

TEST(TensorView, FusedQkvSliceIsNotContiguous) {
  // key = qkv[:, 8:16, :] of a [T, 24, 128] buffer: token stride 24*128, head stride 128.
  TensorView v = make_view(nullptr, DType::bf16, {4, 8, 128});
  v.strides = {24 * 128, 128, 1, 0};
  EXPECT_FALSE(v.is_contiguous());
}

TEST(TensorView, DtypeNamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::i64), 8);
  EXPECT_EQ(dtype_name(DType::u8), "u8");
  EXPECT_EQ(to_string(Device::cuda(2)), "cuda:2");
}

// Only the geometry and page size matter to cache_view(): 3 blocks of 16 tokens x 2 heads x
// head_size 128 in NVFP4 are 3 pages of 4608 bytes, so swapped dimensions show.
PageLayout three_pages() {
  CacheSpec spec;
  spec.num_blocks = 3;
  spec.num_kv_heads = 2;
  spec.head_size = 128;
  return PageLayout::from_spec(spec);
}

TEST(TensorView, CacheViewIsBlocksByPageBytesU8) {
  const PageLayout layout = three_pages();
  EXPECT_EQ(layout.cache_shape(), (std::array<int64_t, 2>{3, 4608}));
  uint8_t byte = 0;
  const TensorView v = cache_view(layout, &byte, Device::cuda(1));
  EXPECT_EQ(v.data, &byte);
  EXPECT_EQ(v.describe(), "[3, 4608] u8 cuda:1");
  EXPECT_EQ(v.stride(0), 4608);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(static_cast<uint64_t>(v.numel()), layout.cache_bytes());
  EXPECT_EQ(cache_view(layout, &byte).device, Device::cpu());
}

DLTensor dl(void* data, DLDataType t, int64_t* shape, int ndim, int64_t* strides = nullptr) {
  DLTensor x{};
  x.data = data;
  x.device = {kDLCPU, 0};
  x.ndim = ndim;
  x.dtype = t;
  x.shape = shape;
  x.strides = strides;
  x.byte_offset = 0;
  return x;
}

TEST(TensorView, ByteRangeAndSharedMemory) {
  alignas(16) float buf[64] = {};
  const TensorView a = make_view(buf, DType::f32, {2, 8});  // buf[0..16)
  const auto [a0, a1] = a.byte_range();
  EXPECT_EQ(a0, reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(a1 - a0, 16 * sizeof(float));
  const TensorView b = make_view(buf + 16, DType::f32, {2, 8});  // right after a
  EXPECT_FALSE(share_memory(a, b));
  const TensorView c = make_view(buf + 15, DType::f32, {1});  // a's last element
  EXPECT_TRUE(share_memory(a, c));
  const TensorView empty = make_view(buf, DType::f32, {0, 8});
  EXPECT_FALSE(share_memory(a, empty));
}

// A view of no elements spans no bytes, whatever its data pointer and strides: a padded stride
// would otherwise give an end below the begin (a "range" that wraps around memory).
TEST(TensorView, EmptyStridedViewHasAnEmptyByteRange) {
  alignas(16) float buf[64] = {};
  TensorView v = make_view(buf + 8, DType::f32, {0, 8});
  v.strides = {100, 1, 0, 0};
  EXPECT_EQ(v.byte_range(), (std::pair<uintptr_t, uintptr_t>{0, 0}));
}

// A stride that takes the view past 64 bits wraps around memory: its element 1 may sit at any
// address, below its data pointer too (here: on `cache`). The range is then all of memory, so
// share_memory cannot be fooled by the wrap (a review found a slot mapping built this way that
// let the CPU writer overwrite the cache it checked against).
TEST(TensorView, AByteRangePast64BitsIsAllOfMemory) {
  alignas(16) int64_t cache[8] = {};
  alignas(16) int64_t after[8] = {};
  TensorView wrapping = make_view(after, DType::i64, {2});
  // element 1 at after + stride * 8 bytes == cache (mod 2^64)
  const uint64_t delta = reinterpret_cast<uintptr_t>(cache) - reinterpret_cast<uintptr_t>(after);
  wrapping.strides[0] = static_cast<int64_t>((delta / 8) | (uint64_t{1} << 61));
  EXPECT_EQ(wrapping.byte_range(), (std::pair<uintptr_t, uintptr_t>{0, UINTPTR_MAX}));
  EXPECT_TRUE(share_memory(wrapping, make_view(cache, DType::i64, {8})));
  TensorView big_shape = make_view(after, DType::i64, {INT64_MAX});
  EXPECT_EQ(big_shape.byte_range(), (std::pair<uintptr_t, uintptr_t>{0, UINTPTR_MAX}));
}

TEST(TensorView, ElementsOverlap) {
  float buf[1] = {};
  TensorView v = make_view(buf, DType::f32, {4, 2, 8});
  EXPECT_FALSE(v.elements_overlap());  // contiguous
  v.strides = {32, 8, 1, 0};           // padded rows: still every element its own
  EXPECT_FALSE(v.elements_overlap());
  v.strides = {0, 8, 1, 0};  // a broadcast token dimension
  EXPECT_TRUE(v.elements_overlap());
  v.strides = {16, 4, 1, 0};  // a head row steps 4 into a row of 8
  EXPECT_TRUE(v.elements_overlap());
  v.strides = {1, 32, 4, 0};  // transposed, disjoint
  EXPECT_FALSE(v.elements_overlap());
  v = make_view(buf, DType::f32, {1, 1, 8});
  v.strides = {0, 0, 1, 0};  // size-1 dimensions may have any stride
  EXPECT_FALSE(v.elements_overlap());
}

TEST(DLPack, MapsEveryDtype) {
  int64_t shape[1] = {4};
  struct Case {
    DLDataType t;
    DType want;
  } cases[] = {{{kDLBfloat, 16, 1}, DType::bf16}, {{kDLFloat, 16, 1}, DType::f16},
               {{kDLFloat, 32, 1}, DType::f32},   {{kDLUInt, 8, 1}, DType::u8},
               {{kDLInt, 32, 1}, DType::i32},     {{kDLInt, 64, 1}, DType::i64}};
  for (const auto& c : cases) {
    EXPECT_EQ(from_dlpack(dl(nullptr, c.t, shape, 1)).dtype, c.want);
  }
}

TEST(DLPack, CompactStridesWhenNull) {
  int64_t shape[3] = {5, 2, 64};
  TensorView v = from_dlpack(dl(nullptr, {kDLBfloat, 16, 1}, shape, 3));
  EXPECT_EQ(v.stride(0), 128);
  EXPECT_EQ(v.stride(1), 64);
  EXPECT_EQ(v.stride(2), 1);
}

TEST(DLPack, KeepsGivenStridesDeviceAndOffset) {
  int64_t shape[3] = {5, 2, 64};
  int64_t strides[3] = {3 * 2 * 64, 64, 1};
  alignas(16) char buf[16];
  DLTensor t = dl(buf, {kDLFloat, 16, 1}, shape, 3, strides);
  t.device = {kDLCUDA, 3};
  t.byte_offset = 8;
  TensorView v = from_dlpack(t);
  EXPECT_EQ(v.stride(0), 384);
  EXPECT_EQ(v.device, Device::cuda(3));
  EXPECT_EQ(v.data, buf + 8);
  EXPECT_FALSE(v.is_contiguous());
}

// Pinned host memory (kDLCUDAHost, what torch's pin_memory() exports) is host memory: CPU
// backends take it like any other host tensor, whatever device id the exporter put there.
TEST(DLPack, CudaHostMemoryIsTheCpu) {
  int64_t shape[1] = {4};
  DLTensor t = dl(nullptr, {kDLFloat, 32, 1}, shape, 1);
  t.device = {kDLCUDAHost, 0};
  EXPECT_EQ(from_dlpack(t).device, Device::cpu());
  t.device = {kDLCUDAHost, 1};
  EXPECT_EQ(from_dlpack(t).device, Device::cpu());
}

// The boundaries of what is accepted: device id 0 (the first GPU, the usual one) and exactly
// kMaxDims (4) dimensions.
TEST(DLPack, AcceptsCudaDeviceZeroAndFourDimensions) {
  int64_t shape[4] = {2, 3, 4, 5};
  DLTensor t = dl(nullptr, {kDLFloat, 32, 1}, shape, 4);
  t.device = {kDLCUDA, 0};
  const TensorView v = from_dlpack(t);
  EXPECT_EQ(v.device, Device::cuda(0));
  EXPECT_EQ(v.ndim, 4);
  EXPECT_EQ(v.stride(0), 60);
  EXPECT_EQ(v.shape[3], 5);
}

void expect_refused(const DLTensor& t, const std::string& fragment) {
  try {
    from_dlpack(t);
    FAIL() << "accepted; expected '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(DLPack, RefusesUnsupported) {
  int64_t shape[5] = {1, 1, 1, 1, 1};
  expect_refused(dl(nullptr, {kDLFloat, 64, 1}, shape, 1), "(code 2, 64 bits) is not supported");
  expect_refused(dl(nullptr, {kDLInt, 8, 1}, shape, 1), "(code 0, 8 bits) is not supported");
  expect_refused(dl(nullptr, {kDLComplex, 64, 1}, shape, 1), "is not supported");
  expect_refused(dl(nullptr, {kDLFloat, 32, 4}, shape, 1), "4 lanes: expected 1");
  expect_refused(dl(nullptr, {kDLFloat, 32, 1}, shape, 5), "5 dimensions: expected 0..4");
  DLTensor metal = dl(nullptr, {kDLFloat, 32, 1}, shape, 1);
  metal.device = {kDLMetal, 0};
  expect_refused(metal, "device type 8 is not supported");
  DLTensor minus_one = dl(nullptr, {kDLFloat, 32, 1}, shape, 1);
  minus_one.device = {kDLCUDA, -1};
  expect_refused(minus_one, "DLPack CUDA device id -1: expected >= 0");
  int64_t negative[1] = {-2};
  expect_refused(dl(nullptr, {kDLFloat, 32, 1}, negative, 1), "negative size -2 in dimension 0");
}

}  // namespace
}  // namespace kvq
