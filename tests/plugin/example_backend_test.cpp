// The out-of-tree example (examples/custom_backend), installed by plugin_example_backend_install,
// loaded from its install folder and selected by name like any backend. Its bytes must be the
// layouts library's nvfp4_quantize_group() at the layout's offsets, and nothing else may change.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kvq/core/registry.h"
#include "kvq/layouts/layout_factory.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq {
namespace {

constexpr int64_t kTokens = 3, kHeads = 2, kHeadSize = 64, kBlocks = 2, kBlockSize = 16;
constexpr uint8_t kUntouched = 0x5A;

BackendOptions options() {
  BackendOptions o;
  o.cache.num_blocks = kBlocks;
  o.cache.block_size = kBlockSize;
  o.cache.num_kv_heads = kHeads;
  o.cache.head_size = kHeadSize;  // layout: HND, K linear, V sm100_swizzled (the defaults)
  o.device = Device::cpu();
  return o;
}

// [kTokens, kHeads, kHeadSize], varied magnitudes so groups get different scale bytes.
std::vector<float> rows(float sign) {
  std::vector<float> x(kTokens * kHeads * kHeadSize);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = sign * static_cast<float>((i * 37) % 101) * 0.173f * static_cast<float>(1 + i % 7);
  }
  return x;
}

Backend example_backend(Registry& r) {
  r.scan({KVQ_EXAMPLE_PLUGIN_DIR});
  for (const auto& f : r.failures()) ADD_FAILURE() << f.file << ": " << f.reason;
  return r.select("example_nvfp4");
}

TEST(ExampleBackend, SelectedByNameWritesTheQuantizersBytesAndNothingElse) {
  Registry registry;
  const Backend backend = example_backend(registry);
  EXPECT_EQ(backend.info().version, "1.0.0");
  EXPECT_TRUE(backend.info().available);
  auto writer = backend.make_writer(options());
  const auto layout = make_layout(options().cache);
  const uint64_t page = layout->page_bytes();
  ASSERT_EQ(writer->layout().page_bytes(), page);

  std::vector<float> key = rows(1.0f), value = rows(-0.5f);
  std::vector<int64_t> slots{17, -1, 5};  // block 1 row 1, padding, block 0 row 5
  std::vector<uint8_t> cache(kBlocks * page, kUntouched);
  WriteArgs args;
  args.key = make_view(key.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  args.value = make_view(value.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  args.slot_mapping = make_view(slots.data(), DType::i64, {kTokens});
  args.cache = make_view(cache.data(), DType::u8, {kBlocks, static_cast<int64_t>(page)});
  args.k_scale = 0.5f;
  args.v_scale = 2.0f;
  const Status s = writer->write(args);
  ASSERT_TRUE(s.is_ok()) << s.message();

  std::vector<uint8_t> expected(cache.size(), kUntouched);
  for (int64_t t = 0; t < kTokens; ++t) {
    if (slots[t] < 0) continue;
    uint8_t* p = expected.data() + (slots[t] / kBlockSize) * page;
    for (Side side : {Side::k, Side::v}) {
      const std::vector<float>& x = side == Side::k ? key : value;
      const float global = nvfp4_global_scale(side == Side::k ? args.k_scale : args.v_scale);
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t g = 0; g < kHeadSize / kNvfp4GroupSize; ++g) {
          const Nvfp4Group q =
              nvfp4_quantize_group(&x[(t * kHeads + h) * kHeadSize + g * kNvfp4GroupSize], global);
          std::memcpy(p + layout->data_offset(side, slots[t] % kBlockSize, h, g), q.data, 8);
          p[layout->scale_offset(side, slots[t] % kBlockSize, h, g)] = q.scale;
        }
      }
    }
  }
  ASSERT_EQ(cache, expected);

  // An out-of-range slot is refused before anything is written.
  slots[1] = kBlocks * kBlockSize;
  const Status bad = writer->write(args);
  EXPECT_EQ(bad.code(), ErrorCode::out_of_range);
  EXPECT_EQ(bad.message(), "slot_mapping[1] = 32: expected < 32");
  EXPECT_EQ(cache, expected);
}

TEST(ExampleBackend, ReaderDequantizesWithTheSharedDefinition) {
  Registry registry;
  const Backend backend = example_backend(registry);
  auto writer = backend.make_writer(options());
  auto reader = backend.make_reader(options());
  const uint64_t page = writer->layout().page_bytes();
  std::vector<float> key = rows(1.0f), value = rows(-1.0f);
  std::vector<int32_t> slots{3, 30, -1};
  std::vector<uint8_t> cache(kBlocks * page, 0);
  WriteArgs w;
  w.key = make_view(key.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  w.value = make_view(value.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  w.slot_mapping = make_view(slots.data(), DType::i32, {kTokens});
  w.cache = make_view(cache.data(), DType::u8, {kBlocks, static_cast<int64_t>(page)});
  ASSERT_TRUE(writer->write(w).is_ok());

  std::vector<float> k_out(key.size(), 7.0f), v_out(value.size(), 7.0f);
  ReadArgs r;
  r.cache = w.cache;
  r.slot_mapping = w.slot_mapping;
  r.key = make_view(k_out.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  r.value = make_view(v_out.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  const Status s = reader->read(r);
  ASSERT_TRUE(s.is_ok()) << s.message();
  // Token 0, head 1, group 1 by hand: the quantizer's codes times its scale.
  const float* x = &key[(0 * kHeads + 1) * kHeadSize + 16];
  const Nvfp4Group q = nvfp4_quantize_group(x, nvfp4_global_scale(1.0f));
  for (int i = 0; i < 16; ++i) {
    const uint8_t code = i % 2 == 0 ? (q.data[i / 2] & 0x0F) : (q.data[i / 2] >> 4);
    EXPECT_EQ(k_out[(0 * kHeads + 1) * kHeadSize + 16 + i], nvfp4_dequantize(code, q.scale, 1.0f))
        << "element " << i;
  }
  for (int64_t i = 2 * kHeads * kHeadSize; i < kTokens * kHeads * kHeadSize; ++i) {
    ASSERT_EQ(k_out[i], 0.0f) << "padding token gives zeros";
    ASSERT_EQ(v_out[i], 0.0f) << "padding token gives zeros";
  }
}

// A refused call returns the error and changes nothing: not the cache, not the outputs.
struct Refusal {
  const char* what;
  std::function<void()> spoil;  // makes one argument wrong
  ErrorCode code;
  std::string message;
};

TEST(ExampleBackend, ReaderRefusesArgumentsItCannotReadAndChangesNothing) {
  Registry registry;
  const Backend backend = example_backend(registry);
  auto writer = backend.make_writer(options());
  auto reader = backend.make_reader(options());
  const auto page = static_cast<int64_t>(writer->layout().page_bytes());
  const std::string short_cache =
      fmt::format("cache: shape [1, {0}]: expected [num_blocks, page_bytes] = [2, {0}]", page);
  std::vector<float> key = rows(1.0f), value = rows(-1.0f);
  std::vector<int32_t> slots{3, 30, -1};  // 30: the last page
  std::vector<uint8_t> cache(kBlocks * page, 0);
  WriteArgs w;
  w.key = make_view(key.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  w.value = make_view(value.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  w.slot_mapping = make_view(slots.data(), DType::i32, {kTokens});
  w.cache = make_view(cache.data(), DType::u8, {kBlocks, page});
  ASSERT_TRUE(writer->write(w).is_ok());
  const std::vector<uint8_t> written = cache;
  std::vector<uint8_t> one_page(cache.begin(), cache.begin() + page);  // a cache too short

  std::vector<float> k_out(key.size(), 7.0f), v_out(value.size(), 7.0f);
  ReadArgs r;
  const auto reset = [&] {
    r = ReadArgs{};
    r.cache = w.cache;
    r.slot_mapping = w.slot_mapping;
    r.key = make_view(k_out.data(), DType::f32, {kTokens, kHeads, kHeadSize});
    r.value = make_view(v_out.data(), DType::f32, {kTokens, kHeads, kHeadSize});
  };
  const std::vector<Refusal> refusals{
      {"a cache one page short",
       [&] {
         r.cache = make_view(one_page.data(), DType::u8, {1, page});
       },
       ErrorCode::invalid_argument, short_cache},
      {"a cache of i32", [&] { r.cache.dtype = DType::i32; }, ErrorCode::invalid_argument,
       "cache: dtype i32: expected u8"},
      {"a cache on cuda", [&] { r.cache.device = Device::cuda(0); }, ErrorCode::invalid_argument,
       "cache: on cuda:0: expected host memory (cpu), the example runs on the CPU"},
      {"slots of f32", [&] { r.slot_mapping.dtype = DType::f32; }, ErrorCode::invalid_argument,
       "slot_mapping: dtype f32: expected i64 or i32"},
      {"2-D slots",
       [&] {
         r.slot_mapping = make_view(slots.data(), DType::i32, {1, kTokens});
       },
       ErrorCode::invalid_argument, "slot_mapping: 2 dimensions: expected 1 [num_tokens]"},
      {"slots on cuda", [&] { r.slot_mapping.device = Device::cuda(0); },
       ErrorCode::invalid_argument,
       "slot_mapping: on cuda:0: expected host memory (cpu), the example runs on the CPU"},
      {"a value output on cuda", [&] { r.value.device = Device::cuda(0); },
       ErrorCode::invalid_argument,
       "value: on cuda:0: expected host memory (cpu), the example runs on the CPU"},
      {"a key output one head short",
       [&] {
         r.key = make_view(k_out.data(), DType::f32, {kTokens, kHeads - 1, kHeadSize});
       },
       ErrorCode::invalid_argument,
       "key: shape [3, 1, 64]: expected [num_tokens, num_kv_heads, head_size] = [3, 2, 64]"},
      {"a key output in the cache",
       [&] {
         r.key = make_view(cache.data(), DType::f32, {kTokens, kHeads, kHeadSize});
       },
       ErrorCode::invalid_argument, "key and cache share memory: expected separate buffers"},
      {"a NaN v_scale", [&] { r.v_scale = std::numeric_limits<float>::quiet_NaN(); },
       ErrorCode::invalid_argument, fmt::format("v_scale = nan: {}", kNvfp4ScaleRule)},
      {"a slot past the cache", [&] { slots[2] = kBlocks * kBlockSize; }, ErrorCode::out_of_range,
       "slot_mapping[2] = 32: expected < 32"},
  };
  for (const Refusal& c : refusals) {
    SCOPED_TRACE(c.what);
    slots = {3, 30, -1};
    reset();
    c.spoil();
    const Status s = reader->read(r);
    EXPECT_EQ(s.code(), c.code) << s.message();
    EXPECT_EQ(s.message(), c.message);
    EXPECT_TRUE(cache == written) << "the cache changed";
    const auto untouched = [](float f) { return f == 7.0f; };
    EXPECT_TRUE(std::ranges::all_of(k_out, untouched) && std::ranges::all_of(v_out, untouched))
        << "an output changed";
    std::ranges::fill(k_out, 7.0f);
    std::ranges::fill(v_out, 7.0f);
    cache = written;
  }
}

TEST(ExampleBackend, WriterRefusesArgumentsItCannotWriteAndChangesNothing) {
  Registry registry;
  const Backend backend = example_backend(registry);
  auto writer = backend.make_writer(options());
  const auto page = static_cast<int64_t>(writer->layout().page_bytes());
  std::vector<float> key = rows(1.0f), value = rows(-1.0f);
  const std::string short_cache =
      fmt::format("cache: shape [1, {0}]: expected [num_blocks, page_bytes] = [2, {0}]", page);
  std::vector<int64_t> slots{3, 30, -1};
  std::vector<uint8_t> cache(kBlocks * page, kUntouched);
  const std::vector<uint8_t> untouched = cache;
  WriteArgs w;
  const auto reset = [&] {
    w = WriteArgs{};
    w.key = make_view(key.data(), DType::f32, {kTokens, kHeads, kHeadSize});
    w.value = make_view(value.data(), DType::f32, {kTokens, kHeads, kHeadSize});
    w.slot_mapping = make_view(slots.data(), DType::i64, {kTokens});
    w.cache = make_view(cache.data(), DType::u8, {kBlocks, page});
  };
  const std::vector<Refusal> refusals{
      {"a cache one page short", [&] { w.cache.shape[0] = kBlocks - 1; },
       ErrorCode::invalid_argument, short_cache},
      {"a cache on cuda", [&] { w.cache.device = Device::cuda(0); }, ErrorCode::invalid_argument,
       "cache: on cuda:0: expected host memory (cpu), the example runs on the CPU"},
      {"slots on cuda", [&] { w.slot_mapping.device = Device::cuda(0); },
       ErrorCode::invalid_argument,
       "slot_mapping: on cuda:0: expected host memory (cpu), the example runs on the CPU"},
      {"a negative key stride", [&] { w.key.strides[0] = -w.key.strides[0]; },
       ErrorCode::invalid_argument, "key: strides [-128, 64, 1]: expected each >= 0"},
      {"a value of another dtype", [&] { w.value.dtype = DType::bf16; },
       ErrorCode::invalid_argument, "value: dtype bf16: expected f32"},
      {"an infinite k_scale", [&] { w.k_scale = std::numeric_limits<float>::infinity(); },
       ErrorCode::invalid_argument, fmt::format("k_scale = inf: {}", kNvfp4ScaleRule)},
      {"a repeated slot", [&] { slots[2] = 3; }, ErrorCode::invalid_argument,
       "slot_mapping[2] = 3: the same slot as slot_mapping[0]: expected each slot at most once "
       "per write"},
      {"a device v_scale", [&] { w.v_scale_ptr = &w.v_scale; }, ErrorCode::invalid_argument,
       "v_scale_ptr: set: expected null (the example reads k_scale and v_scale)"},
  };
  for (const Refusal& c : refusals) {
    SCOPED_TRACE(c.what);
    slots = {3, 30, -1};
    reset();
    c.spoil();
    const Status s = writer->write(w);
    EXPECT_EQ(s.code(), c.code) << s.message();
    EXPECT_EQ(s.message(), c.message);
    EXPECT_TRUE(cache == untouched) << "the cache changed";
    cache = untouched;
  }
}

TEST(ExampleBackend, TakeOutOfRangeSlotsRefusesANullCount) {
  Registry registry;
  const Backend backend = example_backend(registry);
  auto writer = backend.make_writer(options());
  const Status s = writer->take_out_of_range_slots(nullptr);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "count: null, expected an int64_t*");
  int64_t count = -1;
  ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
  EXPECT_EQ(count, 0);
}

}  // namespace
}  // namespace kvq
