// A complete kvq backend plugin on the C boundary alone (kvq/abi/plugin.h, through the C++ helpers
// of kvq/abi/plugin_cpp.h), built out of tree against an installed kvq:
//
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<kvq prefix> && cmake --build build
//   cmake --install build --prefix <where plugins go>
//   KVQ_PLUGIN_PATH=<where plugins go>/lib/kvq/plugins kvq backends
//
// It links no kvq library and needs no spdlog, fmt or Boost: headers of kvq and the standard
// library only, C++17, any compiler. It writes NVFP4 pages one 16-element group at a time on one
// thread, an example of the boundary, not of speed (reference_cpu and cuda are the fast
// ones), and its bytes equal reference_cpu's (tests/plugin/example_backend_test.cpp).
//
// The host checks the whole write/read contract (shapes, dtypes, slots, scales, buffers apart:
// docs/plugins.md, "The contract") and what the writer declares in kvq_requirements before a
// call crosses, so write() and read() below check nothing and trust their arguments.
#include <cstdint>
#include <cstring>
#include <string>

#include "kvq/abi/plugin_cpp.h"          // kvq_plugin, DLTensor, kvq_page_desc; kvq::abi helpers
#include "kvq/layouts/nvfp4_quantize.h"  // header-only: docs/format.md's steps 1-6, no library

namespace {

// ---- reading DLTensors -------------------------------------------------------------------------

// Stride of dimension d in elements. DLPack allows strides == NULL for a compact row-major tensor.
int64_t stride(const DLTensor& x, int d) {
  if (x.strides != nullptr) return x.strides[d];
  int64_t s = 1;
  for (int k = x.ndim - 1; k > d; --k) s *= x.shape[k];
  return s;
}

const char* bytes(const DLTensor& x) {
  return static_cast<const char*>(x.data) + x.byte_offset;
}

// Element i (an offset in elements) of a bf16 or f32 tensor, as float32: bf16 widens exactly.
float element(const DLTensor& x, int64_t i) {
  if (x.dtype.code == kDLFloat && x.dtype.bits == 32) {
    float f;
    std::memcpy(&f, bytes(x) + i * 4, 4);
    return f;
  }
  if (x.dtype.code == kDLBfloat && x.dtype.bits == 16) {
    uint16_t h;
    std::memcpy(&h, bytes(x) + i * 2, 2);
    const uint32_t widened = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &widened, 4);
    return f;
  }
  // Unreachable: the host let only the dtypes of kNeeds through.
  throw kvq::abi::Failure{KVQ_ERR_INTERNAL, "example_nvfp4: an input dtype it did not declare", ""};
}

// slot_mapping[t] of an int64 or int32 [num_tokens] tensor; < 0 is padding.
int64_t slot_at(const DLTensor& slots, int64_t t) {
  const char* p = bytes(slots) + t * stride(slots, 0) * (slots.dtype.bits / 8);
  if (slots.dtype.bits == 64) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- what the writer and reader need beyond the host's contract --------------------------------

// kvq_requirements::input_dtypes: one bit (1 << kvq_dtype) per key/value dtype it reads.
constexpr uint32_t kBf16 = 1u << KVQ_DTYPE_BF16, kF32 = 1u << KVQ_DTYPE_F32;

const kvq_requirements kNeeds{
    sizeof(kvq_requirements),
    {kDLCPU, 0},   // every tensor in host memory
    kBf16 | kF32,  // key, value dtypes; the host refuses f16: "expected bf16, f32"
    1,             // row_alignment: no alignment beyond the element's
    0,             // flags: any non-negative strides, host slot values (checked by the host)
};

// ---- the writer: [T, H, D] rows -> the pages slot_mapping names --------------------------------

class Writer {
 public:
  // A copy: the descriptor the options point at lives only for the create_writer call.
  explicit Writer(const kvq_page_desc& page) : page_(page) {}

  const kvq_requirements& requirements() const { return kNeeds; }

  // May run on several threads at once (kvq/core/kv_cache.h): it keeps no state but page_.
  void write(const kvq_write_args& a) {
    const DLTensor* rows[2] = {a.key, a.value};  // [num_tokens, num_kv_heads, head_size]
    // Host memory (kNeeds.device): a scale pointer, when given, is read here.
    const float scale[2] = {a.k_scale_ptr ? *a.k_scale_ptr : a.k_scale,
                            a.v_scale_ptr ? *a.v_scale_ptr : a.v_scale};
    // [num_blocks, page_bytes], contiguous (the host checked it against page_).
    auto* cache = static_cast<uint8_t*>(a.cache->data) + a.cache->byte_offset;
    const int64_t num_tokens = a.key->shape[0];
    float group[kvq::kNvfp4GroupSize];
    for (int64_t i = 0; i < num_tokens; ++i) {
      const int64_t slot = slot_at(*a.slot_mapping, i);
      if (slot < 0) continue;  // padding: nothing written
      uint8_t* page = cache + static_cast<uint64_t>(slot / page_.block_size) * page_.page_bytes;
      const auto t = static_cast<uint32_t>(slot % page_.block_size);  // the token's row in its page
      for (int side = 0; side < 2; ++side) {                          // 0 = K, 1 = V
        const DLTensor& x = *rows[side];
        const kvq_side_map* m = &page_.side[side];
        const float global = kvq::nvfp4_global_scale(scale[side]);
        for (uint32_t h = 0; h < page_.num_kv_heads; ++h) {
          for (uint32_t g = 0; g < page_.groups; ++g) {  // S = head_size / 16 groups
            const int64_t first =
                i * stride(x, 0) + h * stride(x, 1) + g * kvq::kNvfp4GroupSize * stride(x, 2);
            for (int e = 0; e < kvq::kNvfp4GroupSize; ++e) {
              group[e] = element(x, first + e * stride(x, 2));
            }
            const kvq::Nvfp4Group q = kvq::nvfp4_quantize_group(group, global);
            // page.h places the group: 8 data bytes in the head row, one scale byte.
            std::memcpy(page + kvq_data_offset(m, t, h) + g * kvq::kNvfp4GroupBytes, q.data,
                        kvq::kNvfp4GroupBytes);
            page[kvq_scale_offset(m, t, h, g)] = q.scale;
          }
        }
      }
    }
  }

  // Slot values live on the host, where the host refuses any past the cache: none skipped here.
  void take_out_of_range_slots(int64_t* count) { *count = 0; }

 private:
  kvq_page_desc page_;
};

// ---- the reader: pages -> [T, H, D] f32 rows, zeros for padding --------------------------------

class Reader {
 public:
  explicit Reader(const kvq_page_desc& page) : page_(page) {}

  const kvq_requirements& requirements() const { return kNeeds; }

  void read(const kvq_read_args& a) {
    const DLTensor* out[2] = {a.key, a.value};  // f32 [num_tokens, num_kv_heads, head_size]
    const float scale[2] = {a.k_scale, a.v_scale};
    const auto* cache = static_cast<const uint8_t*>(a.cache->data) + a.cache->byte_offset;
    for (int64_t i = 0; i < a.slot_mapping->shape[0]; ++i) {
      const int64_t slot = slot_at(*a.slot_mapping, i);
      const uint8_t* page =
          slot < 0 ? nullptr
                   : cache + static_cast<uint64_t>(slot / page_.block_size) * page_.page_bytes;
      const auto t = static_cast<uint32_t>(slot < 0 ? 0 : slot % page_.block_size);
      for (int side = 0; side < 2; ++side) {
        const DLTensor& y = *out[side];
        const kvq_side_map* m = &page_.side[side];
        for (uint32_t h = 0; h < page_.num_kv_heads; ++h) {
          for (uint32_t d = 0; d < page_.head_size; ++d) {
            float v = 0.0f;
            if (page != nullptr) {
              const uint8_t pair = page[kvq_data_offset(m, t, h) + d / 2];
              const auto code =
                  static_cast<uint8_t>(d % 2 == 0 ? pair & 0x0F : pair >> 4);  // even: low
              const uint8_t sf = page[kvq_scale_offset(m, t, h, d / kvq::kNvfp4GroupSize)];
              v = kvq::nvfp4_dequantize(code, sf, scale[side]);  // the one definition
            }
            const int64_t at = i * stride(y, 0) + h * stride(y, 1) + d * stride(y, 2);
            std::memcpy(static_cast<char*>(y.data) + y.byte_offset + at * 4, &v, 4);
          }
        }
      }
    }
  }

 private:
  kvq_page_desc page_;
};

// ---- the plugin --------------------------------------------------------------------------------

// What create_writer and create_reader refuse: the host validated the page itself, not whether
// this backend writes its format or runs on the device asked for.
void check_options(const kvq_backend_options& o) {
  if (o.page->format != KVQ_FORMAT_NVFP4) {
    throw kvq::abi::Failure{KVQ_ERR_INVALID_ARGUMENT,
                            std::string("cache.format ") + kvq_format_name(o.page->format) +
                                ": example_nvfp4 writes nvfp4 pages only",
                            "cache.format"};
  }
  if (o.has_device != 0 && o.device.type != kDLCPU) {
    throw kvq::abi::Failure{
        KVQ_ERR_UNAVAILABLE,
        "device cuda:" + std::to_string(o.device.id) + ": example_nvfp4 runs on the cpu only",
        "device"};
  }
}

int32_t init(const kvq_host* host, kvq_error* err) {
  return kvq::abi::keep_host(host, err);  // for kvq::abi::log
}

int32_t probe(kvq_probe* out, kvq_error*) {
  out->available = 1;
  out->score = 1;  // below reference_cpu (10): `backend: auto` never picks the example
  out->reason = "single-threaded CPU example";
  return KVQ_OK;
}

int32_t create_writer(const kvq_backend_options* o, kvq_writer** out, kvq_error* err) {
  return kvq::abi::guard(err, [&] {
    check_options(*o);
    if (kvq::abi::log_enabled(KVQ_LOG_DEBUG)) {  // the line is built only when it is printed
      kvq::abi::log(KVQ_LOG_DEBUG, "example_nvfp4: writer for " +
                                       std::to_string(o->page->num_blocks) + " pages of " +
                                       std::to_string(o->page->page_bytes) + " bytes");
    }
    *out = kvq::abi::new_writer<Writer>(*o->page);  // last: nothing after it can fail
  });
}

int32_t create_reader(const kvq_backend_options* o, kvq_reader** out, kvq_error* err) {
  return kvq::abi::guard(err, [&] {
    check_options(*o);
    *out = kvq::abi::new_reader<Reader>(*o->page);
  });
}

const kvq_plugin* entry() {
  static const kvq_plugin plugin{
      KVQ_PLUGIN_ABI_VERSION,  // always first: the one field the loader compares
      sizeof(kvq_plugin),
      "example_nvfp4",
      "1.0.0",
      "nvfp4",                            // formats, for `kvq backends`
      "HND,NHD x linear,sm100_swizzled",  // every layout page.h describes
      "bf16,f32",                         // the words for kNeeds.input_dtypes
      &init,
      &probe,
      &create_writer,
      &create_reader,
      nullptr,  // create_runtime: host memory, the host's own runtime
      nullptr,  // create_attention: no decode attention
  };
  return &plugin;
}

}  // namespace

KVQ_PLUGIN_EXPORT_ENTRY(entry)
