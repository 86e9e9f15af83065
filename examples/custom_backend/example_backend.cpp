// A complete, minimal kvq backend plugin, built out of tree against an installed kvq:
//
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<kvq prefix> && cmake --build build
//   cmake --install build --prefix <where plugins go>
//   KVQ_PLUGIN_PATH=<where plugins go>/lib/kvq/plugins kvq backends
//
// It writes the NVFP4 cache the config describes by calling the layouts library's
// nvfp4_quantize_group() on every 16-element group, one group at a time on one thread: an
// example of the plugin contract, not of speed (use reference_cpu or cuda_nvfp4 for that).
// Every function the host calls is noexcept and reports failure as a kvq::Status.
#include <cstring>
#include <memory>
#include <string>

#include "kvq/core/logging.h"
#include "kvq/core/plugin_abi.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/layouts/layout_factory.h"
#include "kvq/layouts/nvfp4_quantize.h"

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

// What the example accepts, checked before a single byte is written.
Status check(const kvq::WriteArgs& a, const kvq::PageLayout& layout) {
  const kvq::PageGeometry& g = layout.geometry();
  for (const TensorView* x : {&a.key, &a.value}) {
    const char* name = x == &a.key ? "key" : "value";
    if (x->device.is_cuda())
      return {ErrorCode::invalid_argument, std::string(name) + ": on cuda, expected cpu"};
    if (x->dtype != DType::bf16 && x->dtype != DType::f32) {
      return {ErrorCode::invalid_argument, std::string(name) + ": dtype " +
                                               std::string(kvq::dtype_name(x->dtype)) +
                                               ", the example accepts bf16 and f32"};
    }
    if (x->ndim != 3 || x->size(0) != a.key.size(0) || x->size(1) != g.num_kv_heads ||
        x->size(2) != g.head_size) {
      return {ErrorCode::invalid_argument,
              std::string(name) + ": shape " + x->describe() + ", expected [num_tokens, " +
                  std::to_string(g.num_kv_heads) + ", " + std::to_string(g.head_size) + "]"};
    }
  }
  const TensorView& s = a.slot_mapping;
  if (s.ndim != 1 || s.size(0) != a.key.size(0) ||
      (s.dtype != DType::i64 && s.dtype != DType::i32)) {
    return {ErrorCode::invalid_argument,
            "slot_mapping: " + s.describe() + ", expected [num_tokens] i64 or i32"};
  }
  const auto page = static_cast<int64_t>(layout.page_bytes());
  if (a.cache.dtype != DType::u8 || a.cache.ndim != 2 || a.cache.size(0) != g.num_blocks ||
      a.cache.size(1) != page || !a.cache.is_contiguous()) {
    return {ErrorCode::invalid_argument, "cache: " + a.cache.describe() + ", expected [" +
                                             std::to_string(g.num_blocks) + ", " +
                                             std::to_string(page) + "] u8, contiguous"};
  }
  const int64_t slots = g.num_blocks * g.block_size;
  for (int64_t t = 0; t < s.size(0); ++t) {
    if (const int64_t slot = slot_at(s, t); slot >= slots) {
      return {ErrorCode::out_of_range, "slot_mapping[" + std::to_string(t) +
                                           "] = " + std::to_string(slot) + ": expected < " +
                                           std::to_string(slots)};
    }
  }
  if (const auto r = kvq::find_repeated_slot(s)) {  // two tokens racing for one slot
    return {ErrorCode::invalid_argument, "slot_mapping[" + std::to_string(r->index) +
                                             "]: the same slot as slot_mapping[" +
                                             std::to_string(r->first) + "]"};
  }
  if (!(a.k_scale > 0.0f) || !(a.v_scale > 0.0f) || a.k_scale_ptr || a.v_scale_ptr) {
    return {ErrorCode::invalid_argument, "k_scale/v_scale: expected host values > 0"};
  }
  return Status::ok();
}

class ExampleWriter final : public kvq::KVCacheWriter {
 public:
  explicit ExampleWriter(std::unique_ptr<kvq::PageLayout> layout) : layout_(std::move(layout)) {}

  Status write(const kvq::WriteArgs& a) noexcept override {
    return kvq::catch_as_status([&] {
      kvq::throw_if_error(check(a, *layout_));
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
      const kvq::PageGeometry& g = layout_->geometry();
      if (a.key.dtype != DType::f32 || a.value.dtype != DType::f32 || !a.key.is_contiguous() ||
          !a.value.is_contiguous()) {
        throw kvq::Error(ErrorCode::invalid_argument, "key/value: expected contiguous f32");
      }
      const int64_t tokens = a.slot_mapping.size(0), row_elems = g.num_kv_heads * g.head_size;
      if (a.key.numel() != tokens * row_elems || a.value.numel() != tokens * row_elems) {
        throw kvq::Error(ErrorCode::invalid_argument,
                         "key/value: expected " + std::to_string(tokens * row_elems) + " elements");
      }
      for (int64_t t = 0; t < tokens; ++t) {
        if (slot_at(a.slot_mapping, t) >= g.num_blocks * g.block_size) {
          throw kvq::Error(ErrorCode::out_of_range,
                           "slot_mapping[" + std::to_string(t) + "]: past the cache");
        }
      }
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
