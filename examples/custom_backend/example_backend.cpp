// A complete, minimal kvq backend plugin, built out of tree against an installed kvq:
//
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<kvq prefix> && cmake --build build
//   cmake --install build --prefix <where plugins go>
//   KVQ_PLUGIN_PATH=<where plugins go>/lib/kvq/plugins kvq backends
// (installed into kvq's own prefix, it is found without KVQ_PLUGIN_PATH: see CMakeLists.txt).
//
// It writes the NVFP4 cache the config describes by calling the layouts library's
// nvfp4_quantize_group() on every 16-element group, one group at a time on one thread: an
// example of the plugin contract, not of speed (use reference_cpu or cuda_nvfp4 for that).
// Every function the host calls is noexcept and reports failure as a kvq::Status; every
// argument is checked before anything is read through it or written, as any backend must.
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvq/core/logging.h"
#include "kvq/core/plugin_abi.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/layouts/layout_factory.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/layouts/nvfp4_scale_refusal.h"

namespace {

using kvq::DType;
using kvq::ErrorCode;
using kvq::slot_at;
using kvq::Status;
using kvq::TensorView;

// Element (t, h, d) of a [T, H, D] bf16 or f32 view, as float (bf16 widens exactly).
float element(const TensorView& x, int64_t t, int64_t h, int64_t d) {
  const int64_t i = t * x.stride(0) + h * x.stride(1) + d * x.stride(2);
  if (x.dtype == DType::f32) return x.ptr<const float>()[i];
  const uint32_t bits = static_cast<uint32_t>(x.ptr<const uint16_t>()[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The checks. Each throws a kvq::Error that says which argument, what it found and what was
// expected (catch_as_status hands it to the host as a Status). They all run before a slot or an
// element is read and before a byte is written, so a refused call changes nothing.
constexpr int64_t kAny = -1;  // in an expected shape: any size >= 0 (num_tokens)

[[noreturn]] void refuse(const std::string& message) {
  throw kvq::Error(ErrorCode::invalid_argument, message);
}

// `x` must be a host view of `shape` (kAny: any size; `dims` names the sizes) and one of
// `dtypes`, with non-negative strides (contiguous where asked) and aligned data: then every
// element it names lies in memory its caller gave.
void expect(const TensorView& x, const char* name, const char* dims, std::vector<int64_t> shape,
            std::vector<DType> dtypes, bool contiguous = false) {
  if (x.device != kvq::Device::cpu()) {
    refuse(fmt::format("{}: on {}: expected host memory (cpu), the example runs on the CPU", name,
                       kvq::to_string(x.device)));
  }
  if (x.ndim != std::ssize(shape)) {
    refuse(fmt::format("{}: {} dimensions: expected {} {}", name, x.ndim, shape.size(), dims));
  }
  const std::span<const int64_t> found(x.shape.data(), shape.size());
  const std::span<const int64_t> strides(x.strides.data(), shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (found[i] != shape[i] && (shape[i] != kAny || found[i] < 0)) {
      std::string want;
      for (const int64_t n : shape) {
        want += (want.empty() ? "" : ", ") + (n == kAny ? "*" : std::to_string(n));
      }
      refuse(fmt::format("{}: shape [{}]: expected {} = [{}]", name, fmt::join(found, ", "), dims,
                         want));
    }
  }
  if (std::ranges::find(dtypes, x.dtype) == dtypes.end()) {
    std::string want;
    for (const DType d : dtypes) want += (want.empty() ? "" : " or ") + std::string(dtype_name(d));
    refuse(fmt::format("{}: dtype {}: expected {}", name, dtype_name(x.dtype), want));
  }
  if (std::ranges::any_of(strides, [](int64_t n) { return n < 0; })) {
    refuse(fmt::format("{}: strides [{}]: expected each >= 0", name, fmt::join(strides, ", ")));
  }
  if (contiguous && !x.is_contiguous()) {
    refuse(fmt::format("{}: strides [{}]: expected contiguous", name, fmt::join(strides, ", ")));
  }
  if ((x.data == nullptr && x.numel() > 0) ||
      reinterpret_cast<uintptr_t>(x.data) % kvq::dtype_size(x.dtype) != 0) {
    refuse(fmt::format("{}: data {}: expected a non-null pointer aligned to {} bytes", name, x.data,
                       kvq::dtype_size(x.dtype)));
  }
}

// The cache is written (or read) in place: no other argument may share its bytes.
void expect_apart(const TensorView& a, const char* a_name, const TensorView& b,
                  const char* b_name) {
  if (kvq::share_memory(a, b)) {
    refuse(fmt::format("{} and {} share memory: expected separate buffers", a_name, b_name));
  }
}

void expect_cache(const TensorView& cache, const kvq::PageLayout& layout) {
  const auto [blocks, page_bytes] = layout.cache_shape();
  expect(cache, "cache", "[num_blocks, page_bytes]", {blocks, page_bytes}, {DType::u8},
         /*contiguous=*/true);
}

// Read only after expect(slots, ...) passed. Negative slots are padding.
void expect_slots_in_cache(const TensorView& slots, const kvq::PageGeometry& g) {
  const int64_t capacity = g.num_blocks * g.block_size;
  for (int64_t t = 0; t < slots.size(0); ++t) {
    if (const int64_t slot = slot_at(slots, t); slot >= capacity) {
      throw kvq::Error(ErrorCode::out_of_range,
                       fmt::format("slot_mapping[{}] = {}: expected < {}", t, slot, capacity));
    }
  }
}

void expect_scale(float scale, const char* name) {
  if (!kvq::nvfp4_scale_usable(scale)) {
    refuse(kvq::nvfp4_scale_refusal(name, scale));
  }
}

// What the example writes from: checked before a single byte is written.
void check(const kvq::WriteArgs& a, const kvq::PageLayout& layout) {
  const kvq::PageGeometry& g = layout.geometry();
  const char* rows = "[num_tokens, num_kv_heads, head_size]";
  expect(a.key, "key", rows, {kAny, g.num_kv_heads, g.head_size}, {DType::bf16, DType::f32});
  const int64_t tokens = a.key.size(0);
  expect(a.value, "value", rows, {tokens, g.num_kv_heads, g.head_size}, {a.key.dtype});
  expect(a.slot_mapping, "slot_mapping", "[num_tokens]", {tokens}, {DType::i64, DType::i32});
  expect_cache(a.cache, layout);
  expect_apart(a.key, "key", a.cache, "cache");
  expect_apart(a.value, "value", a.cache, "cache");
  expect_apart(a.slot_mapping, "slot_mapping", a.cache, "cache");
  expect_slots_in_cache(a.slot_mapping, g);
  if (const auto r = kvq::find_repeated_slot(a.slot_mapping)) {  // two tokens racing for one slot
    refuse(
        fmt::format("slot_mapping[{}] = {}: the same slot as slot_mapping[{}]: expected each "
                    "slot at most once per write",
                    r->index, r->slot, r->first));
  }
  if (a.k_scale_ptr || a.v_scale_ptr) {
    refuse(fmt::format("{}: set: expected null (the example reads k_scale and v_scale)",
                       a.k_scale_ptr ? "k_scale_ptr" : "v_scale_ptr"));
  }
  expect_scale(a.k_scale, "k_scale");
  expect_scale(a.v_scale, "v_scale");
}

// What the example reads: the same checks, and outputs apart from the cache, the slots and each
// other.
void check(const kvq::ReadArgs& a, const kvq::PageLayout& layout) {
  const kvq::PageGeometry& g = layout.geometry();
  expect_cache(a.cache, layout);
  expect(a.slot_mapping, "slot_mapping", "[num_tokens]", {kAny}, {DType::i64, DType::i32});
  const int64_t tokens = a.slot_mapping.size(0);
  for (const auto& [x, name] : {std::pair{a.key, "key"}, std::pair{a.value, "value"}}) {
    expect(x, name, "[num_tokens, num_kv_heads, head_size]", {tokens, g.num_kv_heads, g.head_size},
           {DType::f32}, /*contiguous=*/true);
    expect_apart(x, name, a.cache, "cache");
    expect_apart(x, name, a.slot_mapping, "slot_mapping");
  }
  expect_apart(a.key, "key", a.value, "value");
  expect_slots_in_cache(a.slot_mapping, g);
  expect_scale(a.k_scale, "k_scale");
  expect_scale(a.v_scale, "v_scale");
}

class ExampleWriter final : public kvq::KVCacheWriter {
 public:
  explicit ExampleWriter(std::unique_ptr<kvq::PageLayout> layout) : layout_(std::move(layout)) {}

  Status write(const kvq::WriteArgs& a) noexcept override {
    return kvq::catch_as_status([&] {
      check(a, *layout_);
      const kvq::PageGeometry& g = layout_->geometry();
      auto* cache = a.cache.ptr<uint8_t>();  // [num_blocks, page_bytes]
      float group[kvq::kNvfp4GroupSize];
      for (int64_t t = 0; t < a.key.size(0); ++t) {
        const int64_t slot = slot_at(a.slot_mapping, t);
        if (slot < 0) continue;  // padding
        uint8_t* page = cache + (slot / g.block_size) * layout_->page_bytes();
        const int64_t row = slot % g.block_size;
        for (kvq::Side side : {kvq::Side::k, kvq::Side::v}) {
          const TensorView& x = side == kvq::Side::k ? a.key : a.value;
          const float global =
              kvq::nvfp4_global_scale(side == kvq::Side::k ? a.k_scale : a.v_scale);
          for (int64_t h = 0; h < g.num_kv_heads; ++h) {
            for (int64_t q = 0; q < layout_->groups(); ++q) {
              for (int i = 0; i < kvq::kNvfp4GroupSize; ++i) {
                group[i] = element(x, t, h, q * kvq::kNvfp4GroupSize + i);
              }
              const kvq::Nvfp4Group out = kvq::nvfp4_quantize_group(group, global);
              std::memcpy(page + layout_->data_offset(side, row, h, q), out.data, sizeof out.data);
              page[layout_->scale_offset(side, row, h, q)] = out.scale;
            }
          }
        }
      }
    });
  }
  const kvq::PageLayout& layout() const noexcept override { return *layout_; }
  kvq::Device device() const noexcept override { return kvq::Device::cpu(); }
  Status take_out_of_range_slots(int64_t* count) noexcept override {
    if (count == nullptr) return {ErrorCode::invalid_argument, "count: null, expected an int64_t*"};
    *count = 0;  // out-of-range slots are refused before writing
    return Status::ok();
  }

 private:
  std::unique_ptr<kvq::PageLayout> layout_;
};

// Dequantizes with nvfp4_dequantize(), the one definition every reader shares.
class ExampleReader final : public kvq::KVCacheReader {
 public:
  explicit ExampleReader(std::unique_ptr<kvq::PageLayout> layout) : layout_(std::move(layout)) {}

  Status read(const kvq::ReadArgs& a) noexcept override {
    return kvq::catch_as_status([&] {
      check(a, *layout_);
      const kvq::PageGeometry& g = layout_->geometry();
      const auto* cache = a.cache.ptr<const uint8_t>();
      for (int64_t t = 0; t < a.slot_mapping.size(0); ++t) {
        const int64_t slot = slot_at(a.slot_mapping, t);
        for (kvq::Side side : {kvq::Side::k, kvq::Side::v}) {
          float* out = (side == kvq::Side::k ? a.key : a.value).ptr<float>() +
                       t * g.num_kv_heads * g.head_size;
          const float scale = side == kvq::Side::k ? a.k_scale : a.v_scale;
          for (int64_t e = 0; e < g.num_kv_heads * g.head_size; ++e) {
            if (slot < 0) {
              out[e] = 0.0f;
              continue;
            }
            const int64_t h = e / g.head_size, d = e % g.head_size, q = d / kvq::kNvfp4GroupSize;
            const uint8_t* page = cache + (slot / g.block_size) * layout_->page_bytes();
            const int64_t row = slot % g.block_size;
            const uint8_t byte = page[layout_->data_offset(side, row, h, q) + (d % 16) / 2];
            const uint8_t code = d % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
            out[e] =
                kvq::nvfp4_dequantize(code, page[layout_->scale_offset(side, row, h, q)], scale);
          }
        }
      }
    });
  }
  const kvq::PageLayout& layout() const noexcept override { return *layout_; }
  kvq::Device device() const noexcept override { return kvq::Device::cpu(); }

 private:
  std::unique_ptr<kvq::PageLayout> layout_;
};

// Host memory only: refuse any other device up front, with the reason.
Status check_options(const kvq::BackendOptions& options) {
  if (options.device && options.device->is_cuda()) {
    return {ErrorCode::unavailable,
            "device " + kvq::to_string(*options.device) + ": the example runs on cpu only"};
  }
  if (options.cache.format != "nvfp4") {
    return {ErrorCode::invalid_argument,
            "cache.format '" + options.cache.format + "': the example writes nvfp4 only"};
  }
  return Status::ok();
}

Status probe(kvq::ProbeResult* out) noexcept {
  out->available = true;
  out->score = 1;  // below reference_cpu (10): `backend: auto` never picks an example
  out->reason = "single-threaded CPU example";
  return Status::ok();
}

Status create_writer(const kvq::BackendOptions& options, kvq::KVCacheWriter** out) noexcept {
  return kvq::catch_as_status([&] {
    kvq::throw_if_error(check_options(options));
    *out = new ExampleWriter(kvq::make_layout(options.cache));
    KVQ_LOG_DEBUG("example_nvfp4: writer for {} pages", options.cache.num_blocks);
  });
}

Status create_reader(const kvq::BackendOptions& options, kvq::KVCacheReader** out) noexcept {
  return kvq::catch_as_status([&] {
    kvq::throw_if_error(check_options(options));
    *out = new ExampleReader(kvq::make_layout(options.cache));
  });
}

const kvq::PluginDescriptor* entry() {
  static const kvq::PluginDescriptor descriptor{
      kvq::kPluginAbiVersion,  // always first
      KVQ_BUILD_FINGERPRINT,   // compiler, C++ ABI, kvq version this was built against
      "example_nvfp4",
      "1.0.0",
      "nvfp4",
      "HND,NHD x linear,sm100_swizzled",
      &probe,
      &create_writer,
      &create_reader,
      nullptr,  // no DeviceRuntime: host memory, the host's own runtime
  };
  return &descriptor;
}

}  // namespace

KVQ_DEFINE_BACKEND(entry)
