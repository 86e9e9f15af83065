// The cuda plugin's fp8_e4m3, fp8_e5m2 and bf16 pages against reference_cpu: every page byte
// written and unwritten, every value read back (f32 bits), over random cases of every order,
// input dtype (bf16, f16, f32; contiguous and fused-QKV views), slot dtype and scale source (host,
// device pointer, per head on the device), ragged head sizes, misaligned caches, both load paths
// (streaming up to one wave, read-only past it), special values, unusable device scales and CUDA
// graph capture.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "gpu_element_support.h"

namespace kvq::cuda::test {
namespace {

constexpr int kRandomCases = 72;  // a format: each order x dtype x view x scale mode seen

TEST(GpuElement, RandomCasesMatchReferenceCpu) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261210);
    for (int i = 0; i < kRandomCases; ++i) {
      const ElementCase c = random_element_case(rng, i, format);
      SCOPED_TRACE("case " + std::to_string(i) + ": " + describe(c));
      ASSERT_EQ(element_write_differs(c, 3000 + i), "");
    }
  }
}

// Head sizes that are no multiple of a chunk (16 fp8 or 8 bf16 elements, 4 for the reader), tiny
// pages, and caches whose pointer is 1, 2, 4 or 8 bytes off alignment (byte stores and loads).
TEST(GpuElement, RaggedRowsAndMisalignedCachesMatchReferenceCpu) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const CaseShape shapes[] = {{3, 72, 16, 50}, {2, 40, 8, 33}, {1, 4, 16, 20},
                              {5, 8, 1, 7},    {4, 20, 3, 29}, {8, 128, 16, 40}};
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261211);
    int i = 0;
    for (const CaseShape& shape : shapes) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
        const ElementCase c = random_element_case(rng, i++, format, &shape);
        SCOPED_TRACE(describe(c) + ", cache pointer + " + std::to_string(offset));
        // The writer loads input rows 16 bytes at a time and declares that alignment: a row of
        // D * dtype bytes that is no multiple of 16 is refused by the contract, naming it.
        const int64_t esize = dtype_size(c.w.dtype);
        const bool misaligned = (shape.head_size * esize) % 16 != 0 ||
                                (c.w.token_stride * esize) % 16 != 0 ||
                                (c.w.head_stride * esize) % 16 != 0;
        if (misaligned) {
          EXPECT_NE(element_write_differs(c, 4000 + i, offset).find("16-byte aligned for cuda"),
                    std::string::npos);
          continue;
        }
        ASSERT_EQ(element_write_differs(c, 4000 + i, offset), "");
      }
    }
  }
}

// Writes of more than one wave (the read-only load path, blocks of 128) and of one wave
// (streaming), every dtype and view.
TEST(GpuElement, LargeWritesMatchReferenceCpu) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261212);
    for (const auto& [shape, cases] :
         {std::pair{CaseShape{8, 128, 16, 12003}, 6}, std::pair{CaseShape{8, 128, 16, 2000}, 6}}) {
      for (int i = 0; i < cases; ++i) {
        const ElementCase c = random_element_case(rng, i * 8, format, &shape);
        SCOPED_TRACE(describe(c));
        ASSERT_EQ(element_write_differs(c, 5000 + i, 0, /*read_back=*/i < 2), "");
      }
    }
  }
}

// Out-of-range slots (past the cache; 2^31 and more as i64) are skipped and counted, padding
// written nowhere.
TEST(GpuElement, OutOfRangeSlotsAreSkippedAndCounted) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261213);
    for (int i = 0; i < 6; ++i) {
      ElementCase c = random_element_case(rng, i, format);
      const int64_t num_slots = c.w.spec.num_blocks * c.w.spec.block_size;
      for (size_t k = 0; k < c.w.slots.size(); k += 3) {
        c.w.slots[k] = k % 2 == 0 ? num_slots + static_cast<int64_t>(k) : (int64_t{1} << 33);
      }
      SCOPED_TRACE(describe(c));
      ASSERT_EQ(element_write_differs(c, 6000 + i), "");
    }
  }
}

// Every special input in every dtype and scale: NaNs (both signs, quiet and signalling payloads),
// infinities, -0, values past fp8's range, values at fp8 rounding ties, subnormals of the input
// dtype and of float.
TEST(GpuElement, SpecialValuesMatchReferenceCpu) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const uint32_t f32_bits[] = {
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF812345u, 0x7F800000u, 0xFF800000u, 0x80000000u,
      0x00000000u, 0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00400000u, 0x43E00000u, 0x43E80000u,
      0xC3F00000u, 0x47600000u, 0x47700000u, 0xC7700001u, 0x7F7FFFFFu, 0x3B000000u, 0x3A800000u,
      0x37800000u, 0x37000000u, 0x3C800000u, 0x38800000u, 0x43DFFFFFu, 0x47800000u, 0x4F000000u};
  const uint32_t h16_bits[] = {0x7FC0u, 0xFFC1u, 0x7F81u, 0xFF80u, 0x7F80u, 0x8000u, 0x0001u,
                               0x8001u, 0x007Fu, 0x43E0u, 0x43E8u, 0x4770u, 0x7F7Fu, 0x3B00u,
                               0x7E00u, 0xFC00u, 0x7C01u, 0x03FFu, 0x7BFFu, 0x5F00u, 0x5F80u};
  const float scales[] = {1.0f, 0.5f, 3.7e-3f, 1e-30f, 7.1f, 1e30f};
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261214);
    const CaseShape shape{2, 64, 16, 8};
    for (int i = 0; i < 18; ++i) {
      ElementCase c = random_element_case(rng, i, format, &shape);
      WriteCase& w = c.w;
      size_t k = 0;
      for (int side = 0; side < 2; ++side) {
        for (int64_t t = 0; t < w.tokens; ++t) {
          for (int64_t d = 0; d < w.spec.head_size; d += 3) {
            const uint32_t bits = w.dtype == DType::f32 ? f32_bits[k % std::size(f32_bits)]
                                                        : h16_bits[k % std::size(h16_bits)];
            w.set_bits(side, t, (t + d) % w.spec.num_kv_heads, d, bits);
            ++k;
          }
        }
      }
      if (std::string(format) != "bf16") {
        const float s = scales[i % std::size(scales)];
        if (!c.heads[0].empty()) {
          c.heads[0][0] = s;
          c.heads[1][1] = scales[(i + 1) % std::size(scales)];
        } else {
          w.k_scale = s;
          w.v_scale = scales[(i + 2) % std::size(scales)];
        }
      }
      SCOPED_TRACE("case " + std::to_string(i) + ": " + describe(c));
      ASSERT_EQ(element_write_differs(c, 7000 + i), "");
    }
  }
}

// A device scale (pointer or per head) that breaks the scale rule: the write writes nothing, and
// the take reports its tokens with the value, naming the pointer or the head.
TEST(GpuElement, AnUnusableDeviceScaleWritesNothingAndIsReported) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Bad {
    int mode;  // 1: pointer, 2: per head
    int side;
    float value;
    const char* words;
  };
  for (const Bad& bad :
       {Bad{1, 0, 0.0f, "*k_scale_ptr = 0:"}, Bad{1, 1, nan, "*v_scale_ptr = nan:"},
        Bad{2, 1, nan, "v_head_scales[1] = nan:"}, Bad{2, 0, -2.0f, "k_head_scales[1] = -2:"}}) {
    std::mt19937_64 rng(20261215);
    const CaseShape shape{4, 128, 16, 300};  // 300 x 4 x 8 items: several blocks
    ElementCase c = random_element_case(rng, bad.mode, "fp8_e4m3", &shape);
    ASSERT_EQ(c.w.device_scales, bad.mode == 1);
    if (bad.mode == 1) {
      (bad.side == 0 ? c.w.k_scale : c.w.v_scale) = bad.value;
    } else {
      c.heads[bad.side][1] = bad.value;
      c.heads[bad.side][3] = bad.value;
    }
    SCOPED_TRACE(bad.words);
    const PageLayout layout = PageLayout::from_spec(c.w.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 8000);
    auto writer = make_writer(c.w.spec);
    ASSERT_TRUE(writer);
    ElementDeviceCase dc;
    upload_element_case(c, initial, 0, &dc);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(writer->write(dc.d.args).is_ok());
    int64_t skipped = -1;
    const Status s = writer->take_out_of_range_slots(&skipped);
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    const auto written =
        std::count_if(c.w.slots.begin(), c.w.slots.end(), [](int64_t v) { return v >= 0; });
    EXPECT_NE(s.message().find(std::to_string(written) + " token(s)"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(bad.words), std::string::npos) << s.message();
    EXPECT_EQ(compare_cache(dc.d, initial, layout.descriptor()), "");
  }
}

// Writes captured into a CUDA graph and replayed onto a fresh cache give the direct write's bytes;
// a captured read gives the direct read's values.
TEST(GpuElement, CapturedWritesAndReadsReplayAsDirectOnes) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : kElementFormats) {
    std::mt19937_64 rng(20261216);
    for (int i = 0; i < 3; ++i) {
      const CaseShape shape{8, 128, 16, 64};
      const ElementCase c = random_element_case(rng, i, format, &shape);
      SCOPED_TRACE(describe(c));
      const PageLayout layout = PageLayout::from_spec(c.w.spec);
      const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 9000 + i);
      std::vector<uint8_t> want = initial;
      element_reference_write(c, want);
      auto writer = make_writer(c.w.spec);
      auto reader = make_reader(c.w.spec);
      ASSERT_TRUE(writer && reader);
      ElementDeviceCase dc;
      upload_element_case(c, initial, 0, &dc);
      ASSERT_FALSE(HasFatalFailure());
      Stream stream;
      WriteArgs a = dc.d.args;
      a.stream = stream.get();
      Status st;
      CapturedGraph graph(stream.get(), [&] { st = writer->write(a); });
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_NE(graph.exec(), nullptr);
      for (int replay = 0; replay < 2; ++replay) {
        dc.d.upload_cache(initial);
        check_cuda(cudaGraphLaunch(graph.exec(), stream.get()), "replay");
        check_cuda(cudaStreamSynchronize(stream.get()), "sync");
        ASSERT_EQ(compare_cache(dc.d, want, layout.descriptor()), "");
      }
      const int64_t H = c.w.spec.num_kv_heads, D = c.w.spec.head_size, T = c.w.tokens;
      std::vector<int64_t> slots = c.w.slots;
      DeviceBuffer slot_buf(slots.size() * 8), out(static_cast<size_t>(2 * T * H * D) * 4);
      slot_buf.upload(slots);
      ReadArgs r;
      r.cache = a.cache;
      r.slot_mapping = make_view(slot_buf.get(), DType::i64, {T}, Device::cuda(0));
      auto* o = static_cast<float*>(out.get());
      r.key = make_view(o, DType::f32, {T, H, D}, Device::cuda(0));
      r.value = make_view(o + T * H * D, DType::f32, {T, H, D}, Device::cuda(0));
      r.k_scale = a.k_scale_ptr != nullptr ? c.w.k_scale : a.k_scale;
      r.v_scale = a.v_scale_ptr != nullptr ? c.w.v_scale : a.v_scale;
      r.k_head_scales = a.k_head_scales;
      r.v_head_scales = a.v_head_scales;
      r.stream = stream.get();
      CapturedGraph read_graph(stream.get(), [&] { st = reader->read(r); });
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_NE(read_graph.exec(), nullptr);
      check_cuda(cudaGraphLaunch(read_graph.exec(), stream.get()), "replay");
      check_cuda(cudaStreamSynchronize(stream.get()), "sync");
      EXPECT_EQ(compare_floats(out.download_all<float>(), element_reference_read(c, want, slots)),
                "");
    }
  }
}

// Slots past the cache read as NaN, padding as zeros (the reader counts nothing).
TEST(GpuElement, ReaderFillsPaddingWithZerosAndSlotsPastTheCacheWithNan) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : kElementFormats) {
    CacheSpec spec;
    spec.format = format;
    spec.num_blocks = 2;
    spec.num_kv_heads = 2;
    spec.head_size = 36;  // a ragged last chunk too
    const PageLayout layout = PageLayout::from_spec(spec);
    auto reader = make_reader(spec);
    ASSERT_TRUE(reader);
    DeviceBuffer cache(layout.cache_bytes()), slots(2 * 8), out(2 * 2 * 2 * 36 * 4);
    const std::vector<uint8_t> bytes = poison(layout.cache_bytes(), 1);
    cache.upload(bytes);
    const std::vector<int64_t> s = {-1, 32};
    slots.upload(s);
    const Device dev = Device::cuda(0);
    ReadArgs r;
    r.cache =
        make_view(cache.get(), DType::u8, {2, static_cast<int64_t>(layout.page_bytes())}, dev);
    r.slot_mapping = make_view(slots.get(), DType::i64, {2}, dev);
    auto* o = static_cast<float*>(out.get());
    r.key = make_view(o, DType::f32, {2, 2, 36}, dev);
    r.value = make_view(o + 144, DType::f32, {2, 2, 36}, dev);
    ASSERT_TRUE(reader->read(r).is_ok());
    const std::vector<float> got = out.download_all<float>();
    for (int side = 0; side < 2; ++side) {
      for (int i = 0; i < 72; ++i) {
        const float zero = got[static_cast<size_t>(side * 144 + i)];
        const float past = got[static_cast<size_t>(side * 144 + 72 + i)];
        EXPECT_TRUE(zero == 0.0f && !std::signbit(zero)) << format << " " << side << " " << i;
        EXPECT_TRUE(std::isnan(past)) << format << " " << side << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kvq::cuda::test
