// The per-element kernels' host planning (element_plan.cpp), without a GPU: page geometry in
// chunks, the item split and chunk lengths of ragged rows, the access width a cache pointer
// allows, and the descriptor a write or read gets (scales by source, 32-bit offsets, the
// streaming bar, the item limit).
#include "element_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvq/core/page_layout.h"

namespace kvq::cuda {
namespace {

kvq_page_desc page_of(int32_t format, int32_t order, int64_t blocks, int64_t block_size,
                      int64_t heads, int64_t head_size) {
  kvq_page_desc d{};
  int32_t side = 0;
  EXPECT_EQ(kvq_page_desc_init(&d, format, order, KVQ_SCALES_NONE, KVQ_SCALES_NONE, blocks,
                               block_size, heads, head_size, &side),
            KVQ_PAGE_OK);
  return d;
}

TEST(ElementPlan, Nvfp4IsRefusedAtTheFormatKey) {
  kvq_page_desc d{};
  int32_t side = 0;
  ASSERT_EQ(kvq_page_desc_init(&d, KVQ_FORMAT_NVFP4, KVQ_ORDER_HND, KVQ_SCALES_LINEAR,
                               KVQ_SCALES_LINEAR, 4, 16, 8, 128, &side),
            KVQ_PAGE_OK);
  ElementPage p;
  const Status s = make_element_page(d, 16, &p);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.key(), "cache.format");
}

// Every (token, head, chunk) once, chunk lengths summing to head_size, offsets equal to the host
// PageLayout's data offsets, for writer and reader chunks of every per-element format.
TEST(ElementPlan, ItemsCoverEveryElementAtTheLayoutsOffsets) {
  for (int32_t format : {KVQ_FORMAT_FP8_E4M3, KVQ_FORMAT_FP8_E5M2, KVQ_FORMAT_BF16}) {
    for (int32_t order : {KVQ_ORDER_HND, KVQ_ORDER_NHD}) {
      for (int64_t D : {4, 8, 20, 64, 72, 128, 136, 256}) {
        const int64_t H = 3, T = 5, bs = 4;
        const kvq_page_desc d = page_of(format, order, 3, bs, H, D);
        for (uint32_t chunk : {chunk_elements(format), kReadChunkElements}) {
          ElementPage p;
          ASSERT_TRUE(make_element_page(d, chunk, &p).is_ok());
          EXPECT_EQ(p.chunks_div.divisor, (D + chunk - 1) / chunk);
          p.items = static_cast<uint32_t>(T * H * p.chunks_div.divisor);
          std::vector<int> seen(static_cast<size_t>(T * H * D), 0);
          for (uint32_t i = 0; i < p.items; ++i) {
            const ElementIndex ix = split_element_item(p, i);
            ASSERT_LT(ix.token, T);
            const uint32_t n = chunk_length(p, ix.chunk);
            ASSERT_GE(n, 1u);
            ASSERT_LE(n, chunk);
            for (uint32_t e = 0; e < n; ++e) {
              ++seen[static_cast<size_t>((ix.token * H + ix.head) * D + ix.chunk * chunk + e)];
            }
            for (int s = 0; s < 2; ++s) {
              const uint32_t t = ix.token % bs;
              EXPECT_EQ(
                  chunk_offset(p, s, t, ix.head, ix.chunk),
                  kvq_data_offset(&d.side[s], t, ix.head) + ix.chunk * chunk * d.elem_bits / 8);
            }
          }
          for (int v : seen) ASSERT_EQ(v, 1) << kvq_format_name(format) << " D=" << D;
        }
      }
    }
  }
}

TEST(ElementPlan, AccessWidthFollowsThePointerAndTheRows) {
  const kvq_page_desc d = page_of(KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, 4, 16, 8, 128);
  alignas(256) static uint8_t buffer[512];
  EXPECT_EQ(element_access_bytes(buffer, d, 16), 16);
  EXPECT_EQ(element_access_bytes(buffer + 8, d, 16), 8);
  EXPECT_EQ(element_access_bytes(buffer + 1, d, 16), 1);
  const kvq_page_desc ragged = page_of(KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, 4, 16, 8, 72);
  EXPECT_EQ(element_access_bytes(buffer, ragged, 16), 8);  // rows of 72 bytes
  const kvq_page_desc bf16 = page_of(KVQ_FORMAT_BF16, KVQ_ORDER_NHD, 4, 16, 8, 4);
  EXPECT_EQ(element_access_bytes(buffer, bf16, 16), 8);  // rows of 8 bytes
}

struct Tensors {
  std::vector<uint16_t> key, value;
  std::vector<int64_t> slots;
  std::vector<uint8_t> cache;
  std::vector<float> heads;
};

WriteArgs args_for(const kvq_page_desc& d, int64_t T, Tensors& t) {
  const int64_t H = d.num_kv_heads, D = d.head_size;
  t.key.assign(static_cast<size_t>(T * H * D), 0);
  t.value = t.key;
  t.slots.assign(static_cast<size_t>(T), 0);
  t.cache.assign(static_cast<size_t>(d.num_blocks) * d.page_bytes, 0);
  t.heads.assign(static_cast<size_t>(2 * H), 1.0f);
  WriteArgs a;
  a.key = make_view(t.key.data(), DType::bf16, {T, H, D});
  a.value = make_view(t.value.data(), DType::bf16, {T, H, D});
  a.slot_mapping = make_view(t.slots.data(), DType::i64, {T});
  a.cache = make_view(t.cache.data(), DType::u8, {d.num_blocks, d.page_bytes});
  return a;
}

TEST(ElementPlan, WriteDescriptorTakesEachScaleSource) {
  const kvq_page_desc d = page_of(KVQ_FORMAT_FP8_E5M2, KVQ_ORDER_HND, 4, 16, 2, 128);
  ElementPage base;
  ASSERT_TRUE(make_element_page(d, chunk_elements(d.format), &base).is_ok());
  Tensors t;
  WriteArgs a = args_for(d, 10, t);
  a.k_scale = 0.25f;
  float device_value = 2.0f;
  a.v_scale_ptr = &device_value;
  ElementWriteBars bars;
  bars.stream_max_items = 160;
  ElementWriteDesc desc;
  InputType input;
  ASSERT_TRUE(plan_element_write(a, d, base, bars, &desc, &input).is_ok());
  EXPECT_EQ(input, InputType::bf16);
  EXPECT_EQ(desc.format, KVQ_FORMAT_FP8_E5M2);
  EXPECT_EQ(desc.page.items, 10u * 2 * 8);
  EXPECT_EQ(desc.streaming, 1);  // 160 items: at the bar
  EXPECT_EQ(desc.scale[0], 0.25f);
  EXPECT_EQ(desc.scale_ptr[0], nullptr);
  EXPECT_EQ(desc.scale_ptr[1], &device_value);
  EXPECT_EQ(desc.device_scales, 1);
  EXPECT_EQ(desc.has_head_scales, 0);
  EXPECT_EQ(desc.input_offsets_u32, 1);
  EXPECT_EQ(desc.page.data_access_bytes, element_access_bytes(t.cache.data(), d, 16));

  a.v_scale_ptr = nullptr;
  a.k_scale = 1.0f;
  a.k_head_scales = make_view(t.heads.data(), DType::f32, {2});
  bars.stream_max_items = 159;
  ASSERT_TRUE(plan_element_write(a, d, base, bars, &desc, &input).is_ok());
  EXPECT_EQ(desc.streaming, 0);
  EXPECT_EQ(desc.head_scales[0], t.heads.data());
  EXPECT_EQ(desc.head_scales[1], nullptr);
  EXPECT_EQ(desc.has_head_scales, 1);
  EXPECT_EQ(desc.device_scales, 1);

  // Strides whose offsets pass 2^31 elements: 64-bit offsets.
  a.key.strides[0] = int64_t{1} << 30;
  ASSERT_TRUE(plan_element_write(a, d, base, bars, &desc, &input).is_ok());
  EXPECT_EQ(desc.input_offsets_u32, 0);
}

TEST(ElementPlan, Bf16PagesTakeScaleOne) {
  const kvq_page_desc d = page_of(KVQ_FORMAT_BF16, KVQ_ORDER_NHD, 4, 16, 2, 64);
  ElementPage base;
  ASSERT_TRUE(make_element_page(d, chunk_elements(d.format), &base).is_ok());
  Tensors t;
  WriteArgs a = args_for(d, 3, t);
  ElementWriteDesc desc;
  InputType input;
  ASSERT_TRUE(plan_element_write(a, d, base, ElementWriteBars{}, &desc, &input).is_ok());
  EXPECT_EQ(desc.scale[0], 1.0f);
  EXPECT_EQ(desc.scale[1], 1.0f);
  EXPECT_EQ(desc.device_scales, 0);
  EXPECT_EQ(desc.page.items, 3u * 2 * 8);
  EXPECT_EQ(desc.page.code_bytes, 2u);
}

TEST(ElementPlan, WritesOf2To31ItemsAreRefused) {
  const kvq_page_desc d = page_of(KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, 4, 16, 8, 128);
  ElementPage base;
  ASSERT_TRUE(make_element_page(d, chunk_elements(d.format), &base).is_ok());
  Tensors t;
  WriteArgs a = args_for(d, 1, t);
  a.key.shape[0] = a.value.shape[0] = a.slot_mapping.shape[0] = int64_t{1} << 25;  // x 64 items
  ElementWriteDesc desc;
  InputType input;
  const Status s = plan_element_write(a, d, base, ElementWriteBars{}, &desc, &input);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.message().find("2^31 work items"), std::string::npos) << s.message();
}

TEST(ElementPlan, ReadDescriptorTakesHostOrHeadScales) {
  const kvq_page_desc d = page_of(KVQ_FORMAT_FP8_E4M3, KVQ_ORDER_HND, 4, 16, 2, 36);
  ElementPage base;
  ASSERT_TRUE(make_element_page(d, kReadChunkElements, &base).is_ok());
  std::vector<float> out(2 * 5 * 2 * 36), heads(2, 0.5f);
  std::vector<int64_t> slots(5, 0);
  std::vector<uint8_t> cache(static_cast<size_t>(d.num_blocks) * d.page_bytes);
  ReadArgs r;
  r.cache = make_view(cache.data(), DType::u8, {d.num_blocks, d.page_bytes});
  r.slot_mapping = make_view(slots.data(), DType::i64, {5});
  r.key = make_view(out.data(), DType::f32, {5, 2, 36});
  r.value = make_view(out.data() + 360, DType::f32, {5, 2, 36});
  r.k_scale = 3.0f;
  r.v_head_scales = make_view(heads.data(), DType::f32, {2});
  ElementReadDesc desc;
  ASSERT_TRUE(plan_element_read(r, d, base, &desc).is_ok());
  EXPECT_EQ(desc.page.items, 5u * 2 * 9);
  EXPECT_EQ(desc.scale[0], 3.0f);
  EXPECT_EQ(desc.head_scales[0], nullptr);
  EXPECT_EQ(desc.head_scales[1], heads.data());
  EXPECT_EQ(desc.page.data_access_bytes, element_access_bytes(cache.data(), d, 4));
  EXPECT_EQ(desc.output_offsets_u32, 1);
}

}  // namespace
}  // namespace kvq::cuda
