// The GPU reader against the CPU reader: the same cache bytes dequantize to the same f32 bits
// (both use nvfp4_dequantize), padding slots read as zeros, slots past the cache as NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_support.h"
#include "kvq/reference_cpu/reference_reader.h"

namespace kvq::cuda_nvfp4::test {
namespace {

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(GpuReader, DequantizesTheSameBitsAsTheCpuReader) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 24; ++i) {
    WriteCase c = random_case(rng, i * 5);
    SCOPED_TRACE(c.describe());
    const Nvfp4PageLayout layout(c.spec);
    const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size, T = c.tokens;
    auto writer = make_writer(c.spec);
    auto reader = make_reader(c.spec);
    ASSERT_TRUE(writer && reader);
    DeviceCase d = upload_case(c, poison(layout.cache_bytes(), 9000 + i));
    ASSERT_TRUE(writer->write(d.args).is_ok());
    const std::vector<uint8_t> cache = d.cache.download_all<uint8_t>();

    // GPU read into strided outputs (token stride H*D + 16 floats, 16-byte aligned rows).
    const int64_t ts = H * D + 16;
    DeviceBuffer out(static_cast<size_t>(2 * T * ts * 4));
    ReadArgs r;
    r.cache = d.args.cache;
    r.slot_mapping = d.args.slot_mapping;
    r.key = make_view(out.get(), DType::f32, {T, H, D}, Device::cuda(0));
    r.key.strides = {ts, D, 1, 0};
    r.value = r.key;
    r.value.data = static_cast<float*>(out.get()) + T * ts;
    r.k_scale = c.k_scale;
    r.v_scale = c.v_scale;
    const Status s = reader->read(r);
    ASSERT_TRUE(s.is_ok()) << s.message();
    const std::vector<float> gpu = out.download_all<float>();

    // CPU read of the same bytes.
    BackendOptions o;
    o.cache = c.spec;
    o.threads = 1;
    reference_cpu::ReferenceReader cpu_reader(o);
    std::vector<uint8_t> cache_copy = cache;
    std::vector<float> cpu(static_cast<size_t>(2 * T * H * D));
    std::vector<int64_t> slots = c.slots;
    ReadArgs cr;
    cr.cache = make_view(cache_copy.data(), DType::u8,
                         {c.spec.num_blocks, static_cast<int64_t>(layout.page_bytes())});
    cr.slot_mapping = make_view(slots.data(), DType::i64, {T});
    cr.key = make_view(cpu.data(), DType::f32, {T, H, D});
    cr.value = make_view(cpu.data() + T * H * D, DType::f32, {T, H, D});
    cr.k_scale = c.k_scale;
    cr.v_scale = c.v_scale;
    const Status cs = cpu_reader.read(cr);
    ASSERT_TRUE(cs.is_ok()) << cs.message();

    int64_t mismatches = 0;
    for (int side = 0; side < 2; ++side) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < H * D; ++e) {
          const float g = gpu[static_cast<size_t>(side * T * ts + t * ts + e)];
          const float w = cpu[static_cast<size_t>(side * T * H * D + t * H * D + e)];
          if (!same_bits_or_both_nan(g, w) && mismatches++ < 3) {
            ADD_FAILURE() << "side " << side << " token " << t << " element " << e << ": gpu " << g
                          << " cpu " << w;
          }
        }
      }
    }
    ASSERT_EQ(mismatches, 0);
  }
}

TEST(GpuReader, PaddingReadsZerosAndSlotsPastTheCacheReadNaN) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(31);
  WriteCase c = random_case(rng, 0);
  const Nvfp4PageLayout layout(c.spec);
  const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size;
  auto reader = make_reader(c.spec);
  ASSERT_TRUE(reader);
  c.slots = {-1, c.spec.num_blocks * c.spec.block_size};
  c.tokens = 2;
  shape_case(c);
  DeviceCase d = upload_case(c, poison(layout.cache_bytes(), 3));
  DeviceBuffer out(static_cast<size_t>(2 * 2 * H * D * 4));
  ReadArgs r;
  r.cache = d.args.cache;
  r.slot_mapping = d.args.slot_mapping;
  r.key = make_view(out.get(), DType::f32, {2, H, D}, Device::cuda(0));
  r.value =
      make_view(static_cast<float*>(out.get()) + 2 * H * D, DType::f32, {2, H, D}, Device::cuda(0));
  ASSERT_TRUE(reader->read(r).is_ok());
  const std::vector<float> v = out.download_all<float>();
  for (int side = 0; side < 2; ++side) {
    for (int64_t e = 0; e < H * D; ++e) {
      const float pad = v[static_cast<size_t>(side * 2 * H * D + e)];
      const float past = v[static_cast<size_t>(side * 2 * H * D + H * D + e)];
      ASSERT_EQ(pad, 0.0f);
      ASSERT_FALSE(std::signbit(pad));
      ASSERT_TRUE(std::isnan(past));
    }
  }
}

}  // namespace
}  // namespace kvq::cuda_nvfp4::test
