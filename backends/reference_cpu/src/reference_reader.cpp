// The read: for every token, every K and V element of its slot, the format's shared decoding
// (nvfp4_dequantize(code, scale byte, k_scale), ElementCodec::decode(code, scale)), so CPU and
// GPU readers agree bit for bit.
#include "kvq/reference_cpu/reference_reader.h"

#include <cstring>

#include "backend_options.h"
#include "kvq/core/contract.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "parallel_for.h"

namespace kvq::reference_cpu {
namespace {

constexpr int64_t kMinTokensPerThread = 8;

struct ReadJob {
  const kvq_page_desc* desc;
  const uint8_t* cache;     // [num_blocks, page_bytes]
  TensorView slot_mapping;  // [T]
  float* rows[2];           // key, value out: [T, H, D] f32
  int64_t strides[2][3];
  float scale[2];              // nvfp4: k_scale, v_scale
  const float* head_scale[2];  // per-element formats: [num_kv_heads] K and V scales
};

template <int Format>
void read_elements(const ReadJob& job, int64_t begin, int64_t end) {
  using Codec = ElementCodec<Format>;
  using Code = typename Codec::Code;
  const kvq_page_desc& d = *job.desc;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t slot = slot_at(job.slot_mapping, i);
    const uint8_t* page =
        slot < 0 ? nullptr : job.cache + static_cast<uint64_t>(slot / d.block_size) * d.page_bytes;
    const auto t = static_cast<uint32_t>(slot < 0 ? 0 : slot % d.block_size);
    for (int side = 0; side < 2; ++side) {
      const int64_t* st = job.strides[side];
      for (uint32_t h = 0; h < d.num_kv_heads; ++h) {
        float* row = job.rows[side] + i * st[0] + h * st[1];
        const uint8_t* in = page == nullptr ? nullptr : page + kvq_data_offset(&d.side[side], t, h);
        for (int64_t e = 0; e < d.head_size; ++e) {
          Code q{};
          if (in != nullptr) std::memcpy(&q, in + e * static_cast<int64_t>(sizeof(Code)), sizeof q);
          row[e * st[2]] = in == nullptr ? 0.0f : Codec::decode(q, job.head_scale[side][h]);
        }
      }
    }
  }
}

void read_groups(const ReadJob& job, int64_t begin, int64_t end) {
  const kvq_page_desc& d = *job.desc;
  const auto groups = static_cast<uint32_t>(d.groups);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t slot = slot_at(job.slot_mapping, i);
    const uint8_t* page =
        slot < 0 ? nullptr : job.cache + static_cast<uint64_t>(slot / d.block_size) * d.page_bytes;
    const auto t = static_cast<uint32_t>(slot < 0 ? 0 : slot % d.block_size);
    for (int side = 0; side < 2; ++side) {
      const int64_t* st = job.strides[side];
      const kvq_side_map* m = &d.side[side];
      for (uint32_t h = 0; h < d.num_kv_heads; ++h) {
        float* row = job.rows[side] + i * st[0] + h * st[1];
        if (page == nullptr) {  // padding reads as zeros
          for (int64_t e = 0; e < d.head_size; ++e) row[e * st[2]] = 0.0f;
          continue;
        }
        const uint8_t* data_row = page + kvq_data_offset(m, t, h);
        for (uint32_t g = 0; g < groups; ++g) {
          const uint8_t* data = data_row + g * kNvfp4GroupBytes;
          const uint8_t scale = page[kvq_scale_offset(m, t, h, g)];
          for (int k = 0; k < kNvfp4GroupBytes; ++k) {
            const int64_t e = g * kNvfp4GroupSize + 2 * k;
            row[e * st[2]] = nvfp4_dequantize(data[k] & 0xF, scale, job.scale[side]);
            row[(e + 1) * st[2]] = nvfp4_dequantize(data[k] >> 4, scale, job.scale[side]);
          }
        }
      }
    }
  }
}

void read_rows(const ReadJob& job, int64_t begin, int64_t end) {
  switch (job.desc->format) {
    case KVQ_FORMAT_FP8_E4M3: read_elements<KVQ_FORMAT_FP8_E4M3>(job, begin, end); break;
    case KVQ_FORMAT_FP8_E5M2: read_elements<KVQ_FORMAT_FP8_E5M2>(job, begin, end); break;
    case KVQ_FORMAT_BF16: read_elements<KVQ_FORMAT_BF16>(job, begin, end); break;
    default: read_groups(job, begin, end); break;  // nvfp4, the one grouped format
  }
}

}  // namespace

ReferenceReader::ReferenceReader(const BackendOptions& options)
    : ReferenceReader(PageLayout::from_spec(options.cache),
                      check_backend_options(options.device, options.threads)) {}

ReferenceReader::ReferenceReader(const PageLayout& layout, int threads)
    : layout_(layout), threads_(threads) {}

Status ReferenceReader::read(const ReadArgs& args) noexcept {
  if (Status s = check_read_args(args, layout_, requirements(), "reference_cpu"); !s) return s;
  return read_checked(args);
}

Status ReferenceReader::read_checked(const ReadArgs& args) noexcept {
  return catch_as_status([&] {
    const kvq_page_desc& d = layout_.descriptor();
    const int64_t num_tokens = args.slot_mapping.shape[0];
    ReadJob job{};
    job.desc = &d;
    job.cache = static_cast<const uint8_t*>(args.cache.data);
    job.slot_mapping = args.slot_mapping;
    job.rows[0] = static_cast<float*>(args.key.data);
    job.rows[1] = static_cast<float*>(args.value.data);
    for (int k = 0; k < 3; ++k) {
      job.strides[0][k] = args.key.strides[k];
      job.strides[1][k] = args.value.strides[k];
    }
    job.scale[0] = args.k_scale;
    job.scale[1] = args.v_scale;
    const auto scales =
        side_scales(layout_, args.k_scale, args.v_scale, args.k_head_scales, args.v_head_scales);
    job.head_scale[0] = scales[0].data();
    job.head_scale[1] = scales[1].data();
    parallel_for(num_tokens, threads_, kMinTokensPerThread,
                 [&](int64_t begin, int64_t end) { read_rows(job, begin, end); });
  });
}

}  // namespace kvq::reference_cpu
