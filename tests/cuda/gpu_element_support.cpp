#include "gpu_element_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"

namespace kvq::cuda::test {
namespace {

// Slots as reference_cpu takes them: out-of-range ones (skipped and counted by the GPU) made
// padding.
std::vector<int64_t> in_range_slots(const WriteCase& c) {
  const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
  std::vector<int64_t> s = c.slots;
  for (auto& v : s) {
    if (v >= num_slots) v = -1;
  }
  return s;
}

TensorView host_heads(const ElementCase& c, int side) {
  if (c.heads[side].empty()) return {};
  return make_view(const_cast<float*>(c.heads[side].data()), DType::f32, {c.w.spec.num_kv_heads});
}

// A value of `dtype` (random magnitude 1e-3..1e3 a row, as random_case's groups).
float representable_value(std::mt19937_64& rng, DType dtype, float magnitude) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  float v = n(rng) * magnitude;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if (dtype == DType::bf16) u &= 0xFFFF0000u;
  if (dtype == DType::f16) {
    v = std::clamp(v, -60000.0f, 60000.0f);
    if (std::fabs(v) < 6.103515625e-05f) return 0.0f;
    std::memcpy(&u, &v, 4);
    u &= 0xFFFFE000u;
  }
  std::memcpy(&v, &u, 4);
  return v;
}

}  // namespace

ElementCase random_element_case(std::mt19937_64& rng, int index, const char* format,
                                const CaseShape* shape) {
  ElementCase c;
  c.w = random_case(rng, index, shape);
  WriteCase& w = c.w;
  w.spec.format = format;
  w.spec.layout.k_scales.clear();
  w.spec.layout.v_scales.clear();
  const int64_t H = w.spec.num_kv_heads, D = w.spec.head_size;
  if (D % 16 != 0) {  // random_case fills whole groups of 16: the rest of each row here
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    for (int side = 0; side < 2; ++side) {
      for (int64_t t = 0; t < w.tokens; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float magnitude = std::pow(10.0f, u01(rng) * 6.0f - 3.0f);
          for (int64_t d = D / 16 * 16; d < D; ++d) {
            w.set_element(side, t, h, d, representable_value(rng, w.dtype, magnitude));
          }
        }
      }
    }
  }
  const bool bf16 = w.spec.format == "bf16";
  const int mode = bf16 ? 0 : index % 3;  // host, device pointer, per head
  w.device_scales = mode == 1;
  if (bf16) {
    w.k_scale = w.v_scale = 1.0f;
  } else if (mode == 2) {
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    for (auto& side : c.heads) {
      side.resize(static_cast<size_t>(H));
      for (auto& s : side) s = u01(rng) < 0.2f ? 1.0f : std::pow(10.0f, u01(rng) * 4.0f - 3.0f);
    }
    w.k_scale = w.v_scale = 1.0f;
  }
  return c;
}

std::string describe(const ElementCase& c) {
  return fmt::format("{} {}{}", c.w.spec.format, c.w.describe(),
                     c.heads[0].empty() ? "" : " (per-head scales)");
}

void element_reference_write(const ElementCase& c, std::vector<uint8_t>& cache) {
  BackendOptions options;
  options.cache = c.w.spec;
  options.threads = 1;
  reference_cpu::ReferenceWriter writer(options);
  const WriteCase& w = c.w;
  WriteArgs a;
  auto view = [&](int64_t offset) {
    TensorView v = make_view(const_cast<uint8_t*>(w.input.data()) + offset * dtype_size(w.dtype),
                             w.dtype, {w.tokens, w.spec.num_kv_heads, w.spec.head_size});
    v.strides = {w.token_stride, w.head_stride, 1, 0};
    return v;
  };
  a.key = view(w.key_offset);
  a.value = view(w.value_offset);
  std::vector<int64_t> slots = in_range_slots(w);
  a.slot_mapping = make_view(slots.data(), DType::i64, {w.tokens});
  const auto page_bytes = static_cast<int64_t>(cache.size()) / w.spec.num_blocks;
  a.cache = make_view(cache.data(), DType::u8, {w.spec.num_blocks, page_bytes});
  a.k_scale = w.k_scale;
  a.v_scale = w.v_scale;
  a.k_head_scales = host_heads(c, 0);
  a.v_head_scales = host_heads(c, 1);
  const Status s = writer.write(a);
  ASSERT_TRUE(s.is_ok()) << "reference_cpu: " << s.message();
}

std::vector<float> element_reference_read(const ElementCase& c, const std::vector<uint8_t>& cache,
                                          const std::vector<int64_t>& slots) {
  const WriteCase& w = c.w;
  const int64_t H = w.spec.num_kv_heads, D = w.spec.head_size, T = w.tokens;
  BackendOptions o;
  o.cache = w.spec;
  o.threads = 1;
  reference_cpu::ReferenceReader reader(o);
  std::vector<uint8_t> cache_copy = cache;
  std::vector<int64_t> slot_copy = slots;
  std::vector<float> out(static_cast<size_t>(2 * T * H * D));
  ReadArgs r;
  r.cache = make_view(cache_copy.data(), DType::u8,
                      {w.spec.num_blocks, static_cast<int64_t>(cache.size()) / w.spec.num_blocks});
  r.slot_mapping = make_view(slot_copy.data(), DType::i64, {T});
  r.key = make_view(out.data(), DType::f32, {T, H, D});
  r.value = make_view(out.data() + T * H * D, DType::f32, {T, H, D});
  r.k_scale = w.k_scale;
  r.v_scale = w.v_scale;
  r.k_head_scales = host_heads(c, 0);
  r.v_head_scales = host_heads(c, 1);
  const Status s = reader.read(r);
  EXPECT_TRUE(s.is_ok()) << "reference_cpu reader: " << s.message();
  return out;
}

void upload_element_case(const ElementCase& c, const std::vector<uint8_t>& initial_cache,
                         size_t cache_offset, ElementDeviceCase* out) {
  out->d = upload_case(c.w, initial_cache, cache_offset);
  if (c.heads[0].empty()) return;
  const int64_t H = c.w.spec.num_kv_heads;
  std::vector<float> both(c.heads[0]);
  both.insert(both.end(), c.heads[1].begin(), c.heads[1].end());
  out->heads = DeviceBuffer(both.size() * sizeof(float));
  out->heads.upload(both);
  auto* p = static_cast<float*>(out->heads.get());
  out->d.args.k_head_scales = make_view(p, DType::f32, {H}, Device::cuda(0));
  out->d.args.v_head_scales = make_view(p + H, DType::f32, {H}, Device::cuda(0));
  out->d.args.k_scale = 1.0f;
  out->d.args.v_scale = 1.0f;
}

std::string compare_floats(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return fmt::format("{} values vs {}", got.size(), want.size());
  size_t count = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && count++ == 0) first = i;
  }
  if (count == 0) return {};
  uint32_t g, w;
  std::memcpy(&g, &got[first], 4);
  std::memcpy(&w, &want[first], 4);
  return fmt::format("{} values differ; first at {}: got {:#010x} ({}), expected {:#010x} ({})",
                     count, first, g, got[first], w, want[first]);
}

std::string element_write_differs(const ElementCase& c, uint64_t seed, size_t cache_offset,
                                  bool read_back) {
  const WriteCase& w = c.w;
  const PageLayout layout = PageLayout::from_spec(w.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), seed);
  std::vector<uint8_t> want = initial;
  element_reference_write(c, want);
  if (::testing::Test::HasFatalFailure()) return "the reference write failed (above)";
  auto writer = make_writer(w.spec);
  if (!writer) return "no writer";
  ElementDeviceCase dc;
  upload_element_case(c, initial, cache_offset, &dc);
  if (::testing::Test::HasFatalFailure()) return "a CUDA call failed (above)";
  if (const Status s = writer->write(dc.d.args); !s) return "write refused: " + s.message();
  int64_t skipped = -1;
  if (const Status s = writer->take_out_of_range_slots(&skipped); !s) {
    return "take_out_of_range_slots: " + s.message();
  }
  const int64_t num_slots = w.spec.num_blocks * w.spec.block_size;
  const auto out_of_range =
      std::count_if(w.slots.begin(), w.slots.end(), [&](int64_t s) { return s >= num_slots; });
  if (skipped != out_of_range) {
    return fmt::format("out-of-range slots counted: {}, expected {}", skipped, out_of_range);
  }
  if (std::string e = compare_cache(dc.d, want, layout.descriptor()); !e.empty()) return e;
  if (!read_back) return {};
  // The reader on the written cache, the case's in-range slots (negative ones read as zeros).
  auto reader = make_reader(w.spec);
  if (!reader) return "no reader";
  const int64_t H = w.spec.num_kv_heads, D = w.spec.head_size, T = w.tokens;
  const std::vector<int64_t> slots = in_range_slots(w);
  DeviceBuffer slot_buf(slots.size() * 8), out(static_cast<size_t>(2 * T * H * D) * 4);
  slot_buf.upload(slots);
  ReadArgs r;
  r.cache = dc.d.args.cache;
  r.slot_mapping = make_view(slot_buf.get(), DType::i64, {T}, Device::cuda(0));
  auto* o = static_cast<float*>(out.get());
  r.key = make_view(o, DType::f32, {T, H, D}, Device::cuda(0));
  r.value = make_view(o + T * H * D, DType::f32, {T, H, D}, Device::cuda(0));
  r.k_scale = dc.d.args.k_scale_ptr != nullptr ? w.k_scale : dc.d.args.k_scale;
  r.v_scale = dc.d.args.v_scale_ptr != nullptr ? w.v_scale : dc.d.args.v_scale;
  r.k_head_scales = dc.d.args.k_head_scales;
  r.v_head_scales = dc.d.args.v_head_scales;
  if (const Status s = reader->read(r); !s) return "read refused: " + s.message();
  const std::vector<float> got = out.download_all<float>();
  if (std::string e = compare_floats(got, element_reference_read(c, want, slots)); !e.empty()) {
    return "read back: " + e;
  }
  return {};
}

}  // namespace kvq::cuda::test
