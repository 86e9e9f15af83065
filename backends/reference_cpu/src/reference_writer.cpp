// The write: check everything (kvq/core/contract.h), then encode every token's K and V rows into
// the bytes the layout's descriptor places: nvfp4 group by group (nvfp4_quantize_group, steps
// 1..6 of the format), fp8 and bf16 element by element (ElementCodec).
#include "kvq/reference_cpu/reference_writer.h"

#include <array>
#include <cstring>
#include <vector>

#include "backend_options.h"
#include "element_load.h"
#include "kvq/core/contract.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "parallel_for.h"

namespace kvq::reference_cpu {
namespace {

// A thread is worth starting for this many tokens (each is H * D * 2 elements).
constexpr int64_t kMinTokensPerThread = 8;

struct WriteJob {
  const kvq_page_desc* desc;
  const uint8_t* rows[2];   // key, value: [T, H, D]
  int64_t strides[2][3];    // in elements
  TensorView slot_mapping;  // [T]
  uint8_t* cache;           // [num_blocks, page_bytes]
  float global_scale[2];    // nvfp4: 1 / k_scale, 1 / v_scale
  const float* scale[2];    // per-element formats: [num_kv_heads] K and V scales
};

template <DType T>
void write_tokens(const WriteJob& job, int64_t begin, int64_t end) {
  const kvq_page_desc& d = *job.desc;
  const auto groups = static_cast<uint32_t>(d.groups);
  constexpr int64_t elem = dtype_size(T);
  float x[kNvfp4GroupSize];
  for (int64_t i = begin; i < end; ++i) {
    const int64_t slot = slot_at(job.slot_mapping, i);
    if (slot < 0) continue;  // padding
    uint8_t* page = job.cache + static_cast<uint64_t>(slot / d.block_size) * d.page_bytes;
    const auto t = static_cast<uint32_t>(slot % d.block_size);
    for (int side = 0; side < 2; ++side) {
      const int64_t* st = job.strides[side];
      const kvq_side_map* m = &d.side[side];
      for (uint32_t h = 0; h < d.num_kv_heads; ++h) {
        const uint8_t* row = job.rows[side] + (i * st[0] + h * st[1]) * elem;
        uint8_t* data_row = page + kvq_data_offset(m, t, h);
        for (uint32_t g = 0; g < groups; ++g) {
          for (int e = 0; e < kNvfp4GroupSize; ++e) {
            x[e] = load_element<T>(row, (g * kNvfp4GroupSize + e) * st[2]);
          }
          const Nvfp4Group q = nvfp4_quantize_group(x, job.global_scale[side]);
          std::memcpy(data_row + g * kNvfp4GroupBytes, q.data, kNvfp4GroupBytes);
          page[kvq_scale_offset(m, t, h, g)] = q.scale;
        }
      }
    }
  }
}

template <DType T, int Format>
void write_elements(const WriteJob& job, int64_t begin, int64_t end) {
  using Codec = ElementCodec<Format>;
  using Code = typename Codec::Code;
  const kvq_page_desc& d = *job.desc;
  constexpr int64_t elem = dtype_size(T);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t slot = slot_at(job.slot_mapping, i);
    if (slot < 0) continue;  // padding
    uint8_t* page = job.cache + static_cast<uint64_t>(slot / d.block_size) * d.page_bytes;
    const auto t = static_cast<uint32_t>(slot % d.block_size);
    for (int side = 0; side < 2; ++side) {
      const int64_t* st = job.strides[side];
      for (uint32_t h = 0; h < d.num_kv_heads; ++h) {
        const uint8_t* row = job.rows[side] + (i * st[0] + h * st[1]) * elem;
        uint8_t* out = page + kvq_data_offset(&d.side[side], t, h);
        const float scale = job.scale[side][h];
        for (int64_t e = 0; e < d.head_size; ++e) {
          const Code q = Codec::encode(load_element<T>(row, e * st[2]), scale);
          std::memcpy(out + e * static_cast<int64_t>(sizeof(Code)), &q, sizeof(Code));
        }
      }
    }
  }
}

template <DType T>
void write_rows(const WriteJob& job, int64_t begin, int64_t end) {
  switch (job.desc->format) {
    case KVQ_FORMAT_FP8_E4M3: write_elements<T, KVQ_FORMAT_FP8_E4M3>(job, begin, end); break;
    case KVQ_FORMAT_FP8_E5M2: write_elements<T, KVQ_FORMAT_FP8_E5M2>(job, begin, end); break;
    case KVQ_FORMAT_BF16: write_elements<T, KVQ_FORMAT_BF16>(job, begin, end); break;
    default: write_tokens<T>(job, begin, end); break;  // nvfp4, the one grouped format
  }
}

}  // namespace

std::array<std::vector<float>, 2> side_scales(const PageLayout& layout, float k_scale,
                                              float v_scale, const TensorView& k_heads,
                                              const TensorView& v_heads) {
  const auto heads = static_cast<size_t>(layout.geometry().num_kv_heads);
  std::array<std::vector<float>, 2> out{std::vector<float>(heads, k_scale),
                                        std::vector<float>(heads, v_scale)};
  const TensorView* given[2] = {&k_heads, &v_heads};
  for (size_t side = 0; side < 2; ++side) {
    if (given[side]->data == nullptr) continue;
    const float* p = given[side]->ptr<const float>();  // contiguous [num_kv_heads] (contract)
    out[side].assign(p, p + heads);
  }
  return out;
}

const kvq_requirements& requirements() {
  static const kvq_requirements needs{
      sizeof(kvq_requirements),
      {kDLCPU, 0},
      (1u << static_cast<uint32_t>(DType::bf16)) | (1u << static_cast<uint32_t>(DType::f16)) |
          (1u << static_cast<uint32_t>(DType::f32)),
      1,
      KVQ_REQ_HEAD_SCALES,
  };
  return needs;
}

ReferenceWriter::ReferenceWriter(const BackendOptions& options)
    : ReferenceWriter(PageLayout::from_spec(options.cache),
                      check_backend_options(options.device, options.threads)) {}

ReferenceWriter::ReferenceWriter(const PageLayout& layout, int threads)
    : layout_(layout), threads_(threads) {}

Status ReferenceWriter::write(const WriteArgs& args) noexcept {
  if (Status s = check_write_args(args, layout_, requirements(), "reference_cpu"); !s) return s;
  return write_checked(args);
}

Status ReferenceWriter::write_checked(const WriteArgs& args) noexcept {
  return catch_as_status([&] {
    const kvq_page_desc& d = layout_.descriptor();
    // The contract passed: shapes, slots and host scales (a pointer's value too) are usable.
    const float k_scale = args.k_scale_ptr != nullptr ? *args.k_scale_ptr : args.k_scale;
    const float v_scale = args.v_scale_ptr != nullptr ? *args.v_scale_ptr : args.v_scale;
    const int64_t num_tokens = args.key.shape[0];
    WriteJob job{};
    job.desc = &d;
    job.rows[0] = static_cast<const uint8_t*>(args.key.data);
    job.rows[1] = static_cast<const uint8_t*>(args.value.data);
    for (int k = 0; k < 3; ++k) {
      job.strides[0][k] = args.key.strides[k];
      job.strides[1][k] = args.value.strides[k];
    }
    job.slot_mapping = args.slot_mapping;
    job.cache = static_cast<uint8_t*>(args.cache.data);
    job.global_scale[0] = nvfp4_global_scale(k_scale);
    job.global_scale[1] = nvfp4_global_scale(v_scale);
    const auto scales =
        side_scales(layout_, k_scale, v_scale, args.k_head_scales, args.v_head_scales);
    job.scale[0] = scales[0].data();
    job.scale[1] = scales[1].data();

    auto run = [&](auto write_range) {
      parallel_for(num_tokens, threads_, kMinTokensPerThread,
                   [&](int64_t begin, int64_t end) { write_range(job, begin, end); });
    };
    switch (args.key.dtype) {
      case DType::bf16: run(write_rows<DType::bf16>); break;
      case DType::f16: run(write_rows<DType::f16>); break;
      default: run(write_rows<DType::f32>); break;  // the contract allowed nothing else
    }
  });
}

Status ReferenceWriter::take_out_of_range_slots(int64_t* count) noexcept {
  if (count == nullptr) return {ErrorCode::invalid_argument, "count: null pointer"};
  *count = 0;
  return Status::ok();
}

}  // namespace kvq::reference_cpu
