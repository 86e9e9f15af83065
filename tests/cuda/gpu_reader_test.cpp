// The GPU reader against the CPU reader: the same cache bytes dequantize to the same f32 bits
// (both use nvfp4_dequantize), padding slots read as zeros, slots past the cache as NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "gpu_test_support.h"
#include "kvq/reference_cpu/reference_reader.h"

namespace kvq::cuda::test {
namespace {

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The CPU reader's values for the case's tokens from `cache` (host bytes): key then value, each
// [T, H, D] contiguous.
std::vector<float> cpu_read(const WriteCase& c, const std::vector<uint8_t>& cache) {
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size, T = c.tokens;
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
  EXPECT_TRUE(cs.is_ok()) << cs.message();
  return cpu;
}

// Differing values (NaN = NaN), the first 3 reported. `gpu`: side s at s * gpu_side, token t at
// t * gpu_token (default: row); `cpu`: contiguous sides of cpu_side values.
int64_t count_mismatches(const std::vector<float>& gpu, const std::vector<float>& cpu,
                         int64_t gpu_side, int64_t cpu_side, int64_t tokens, int64_t row,
                         int64_t gpu_token = -1) {
  if (gpu_token < 0) gpu_token = row;
  int64_t mismatches = 0;
  for (int side = 0; side < 2; ++side) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < row; ++e) {
        const float g = gpu[static_cast<size_t>(side * gpu_side + t * gpu_token + e)];
        const float w = cpu[static_cast<size_t>(side * cpu_side + t * row + e)];
        if (!same_bits_or_both_nan(g, w) && mismatches++ < 3) {
          ADD_FAILURE() << "side " << side << " token " << t << " element " << e << ": gpu " << g
                        << " cpu " << w;
        }
      }
    }
  }
  return mismatches;
}

// `reader` reads the case's slots from `d`'s cache into contiguous [T, H, D] key and value
// outputs: every value equals the CPU reader's on `cache` (the same bytes, on the host).
void expect_gpu_read_equals_cpu_read(const WriteCase& c, const DeviceCase& d, KVCacheReader& reader,
                                     const std::vector<uint8_t>& cache) {
  const int64_t T = c.tokens, H = c.spec.num_kv_heads, D = c.spec.head_size;
  DeviceBuffer out(static_cast<size_t>(2 * T * H * D * 4));
  ReadArgs r;
  r.cache = d.args.cache;
  r.slot_mapping = d.args.slot_mapping;
  r.key = make_view(out.get(), DType::f32, {T, H, D}, Device::cuda(0));
  r.value =
      make_view(static_cast<float*>(out.get()) + T * H * D, DType::f32, {T, H, D}, Device::cuda(0));
  r.k_scale = c.k_scale;
  r.v_scale = c.v_scale;
  const Status rs = reader.read(r);
  ASSERT_TRUE(rs.is_ok()) << rs.message();
  const std::vector<float> gpu = out.download_all<float>();
  const std::vector<float> cpu = cpu_read(c, cache);
  ASSERT_EQ(count_mismatches(gpu, cpu, T * H * D, T * H * D, T, H * D), 0);
}

TEST(GpuReader, DequantizesTheSameBitsAsTheCpuReader) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 24; ++i) {
    WriteCase c = random_case(rng, i * 5);
    SCOPED_TRACE(c.describe());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size, T = c.tokens;
    auto writer = make_writer(c.spec);
    auto reader = make_reader(c.spec);
    ASSERT_TRUE(writer && reader);
    DeviceCase d = upload_case(c, poison(layout.cache_bytes(), 9000 + i));
    ASSERT_TRUE(writer->write(d.args).is_ok());
    const std::vector<uint8_t> cache = d.download_cache();
    EXPECT_EQ(d.guards_changed(), "");

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

    const std::vector<float> cpu = cpu_read(c, cache);
    ASSERT_EQ(count_mismatches(gpu, cpu, T * ts, T * H * D, T, H * D, ts), 0);
  }
}

// A cache of random bytes, every slot read: all 256 data bytes (every E2M1 code in both nibbles,
// -0 included) and all 256 scale bytes (subnormal, NaN) dequantize as the CPU reader does them.
TEST(GpuReader, EveryCodeAndScaleByteReadsAsTheCpuReaderReadsIt) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(7);
  for (const char* order : {"HND", "NHD"}) {
    WriteCase c;
    c.spec.block_size = 16;
    c.spec.num_kv_heads = 4;
    c.spec.head_size = 64;
    c.spec.num_blocks = 8;
    c.spec.layout.order = order;
    c.tokens = c.spec.num_blocks * c.spec.block_size;  // 128 tokens: 65,536 data bytes
    c.k_scale = 0.75f;
    c.v_scale = 2.5f;
    shape_case(c);
    c.slots.resize(static_cast<size_t>(c.tokens));
    std::iota(c.slots.begin(), c.slots.end(), 0);
    std::shuffle(c.slots.begin(), c.slots.end(), rng);
    SCOPED_TRACE(c.describe());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> cache = poison(layout.cache_bytes(), 1234);
    DeviceCase d = upload_case(c, cache);
    ASSERT_FALSE(HasFatalFailure());
    auto reader = make_reader(c.spec);
    ASSERT_TRUE(reader);
    ASSERT_NO_FATAL_FAILURE(expect_gpu_read_equals_cpu_read(c, d, *reader, cache));
  }
}

// Geometries and cache pointers whose data rows are only 4-, 2- or 1-byte aligned: the writer's
// narrow stores and the reader's byte loads (data_access_bytes < 8), against the reference bytes
// and the CPU reader's values.
TEST(GpuReader, NarrowlyAlignedCachesWriteAndReadTheReferenceValues) {
  KVQ_REQUIRE_CUDA_DEVICE();
  struct Geometry {
    int64_t block_size, heads, head_size;
    const char* order;
  };
  // A page is [K data | K scales | V data | V scales], so V data starts T*H*D*9/16 bytes in:
  // with the cache pointer's offset, rows are 1-aligned for (1, 1, 16) and (1, 3, 80), 2-aligned
  // for (1, 1, 32), 4-aligned for (1, 1, 64); (16, 8, 128) is narrowed by the pointer alone.
  const Geometry geometries[] = {{1, 1, 16, "NHD"},
                                 {1, 3, 80, "HND"},
                                 {1, 1, 32, "HND"},
                                 {1, 1, 64, "NHD"},
                                 {16, 8, 128, "NHD"}};
  std::mt19937_64 rng(4242);
  for (const Geometry& g : geometries) {
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{2}, size_t{4}}) {
      WriteCase c;
      c.spec.block_size = g.block_size;
      c.spec.num_kv_heads = g.heads;
      c.spec.head_size = g.head_size;
      c.spec.layout.order = g.order;
      c.spec.layout.k_scales = "linear";
      c.spec.layout.v_scales = "linear";
      c.tokens = 37;
      c.spec.num_blocks = (c.tokens + 5 + g.block_size - 1) / g.block_size;
      c.k_scale = 0.25f;
      c.v_scale = 3.0f;
      shape_case(c);
      std::normal_distribution<float> n(0.0f, 1.0f);
      for (int side = 0; side < 2; ++side) {
        for (int64_t t = 0; t < c.tokens; ++t) {
          for (int64_t h = 0; h < g.heads; ++h) {
            for (int64_t d = 0; d < g.head_size; ++d) {
              c.set_element(side, t, h, d, bf16_to_float(float_to_bf16_exact(n(rng) * 10.0f)));
            }
          }
        }
      }
      std::vector<int64_t> all(static_cast<size_t>(c.spec.num_blocks * g.block_size));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      c.slots.assign(all.begin(), all.begin() + c.tokens);
      c.slots[3] = -1;
      SCOPED_TRACE(c.describe() + ", cache pointer + " + std::to_string(offset));

      const PageLayout layout = PageLayout::from_spec(c.spec);
      const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 77 + offset);
      std::vector<uint8_t> want = initial;
      reference_write(c, want);
      DeviceCase d = upload_case(c, initial, offset);
      ASSERT_FALSE(HasFatalFailure());
      auto writer = make_writer(c.spec);
      auto reader = make_reader(c.spec);
      ASSERT_TRUE(writer && reader);
      const Status ws = writer->write(d.args);
      ASSERT_TRUE(ws.is_ok()) << ws.message();
      ASSERT_EQ(compare_cache(d, want, layout.descriptor()), "");

      ASSERT_NO_FATAL_FAILURE(expect_gpu_read_equals_cpu_read(c, d, *reader, want));
    }
  }
}

TEST(GpuReader, PaddingReadsZerosAndSlotsPastTheCacheReadNaN) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(31);
  WriteCase c = random_case(rng, 0);
  const PageLayout layout = PageLayout::from_spec(c.spec);
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
}  // namespace kvq::cuda::test
