// The reference decode attention (reference_attention.h): per (sequence, kv head), the K and V
// rows of the sequence's tokens dequantized once into f64, then each query head of the group
// attends over them in f64.
#include "kvq/reference_cpu/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_options.h"
#include "element_load.h"
#include "element_store.h"
#include "kvq/core/contract.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "parallel_for.h"

namespace kvq::reference_cpu {
namespace {

struct AttendJob {
  const kvq_page_desc* desc;
  const uint8_t* cache;  // [num_blocks, page_bytes]
  const AttentionArgs* args;
  float scale[2];              // nvfp4: k_scale, v_scale
  const float* head_scale[2];  // [num_kv_heads] per side (per-element formats)
  int64_t group;               // num_q_heads / num_kv_heads
};

// Row (t, h) of side `side` in `page`, dequantized as the reference reader does, into out[D].
void decode_row(const AttendJob& job, const uint8_t* page, uint32_t t, uint32_t h, int side,
                double* out) {
  const kvq_page_desc& d = *job.desc;
  const kvq_side_map* m = &d.side[side];
  const uint8_t* row = page + kvq_data_offset(m, t, h);
  const auto D = static_cast<size_t>(d.head_size);
  switch (d.format) {
    case KVQ_FORMAT_FP8_E4M3:
      for (size_t e = 0; e < D; ++e) {
        out[e] = ElementCodec<KVQ_FORMAT_FP8_E4M3>::decode(row[e], job.head_scale[side][h]);
      }
      break;
    case KVQ_FORMAT_FP8_E5M2:
      for (size_t e = 0; e < D; ++e) {
        out[e] = ElementCodec<KVQ_FORMAT_FP8_E5M2>::decode(row[e], job.head_scale[side][h]);
      }
      break;
    case KVQ_FORMAT_BF16:
      for (size_t e = 0; e < D; ++e) {
        uint16_t q;
        std::memcpy(&q, row + 2 * e, sizeof q);
        out[e] = ElementCodec<KVQ_FORMAT_BF16>::decode(q, 1.0f);
      }
      break;
    default:  // nvfp4
      for (uint32_t g = 0; g < d.groups; ++g) {
        const uint8_t scale = page[kvq_scale_offset(m, t, h, g)];
        for (int k = 0; k < kNvfp4GroupBytes; ++k) {
          const uint8_t byte = row[g * kNvfp4GroupBytes + static_cast<uint32_t>(k)];
          const size_t e = g * kNvfp4GroupSize + 2 * static_cast<size_t>(k);
          out[e] = nvfp4_dequantize(byte & 0xF, scale, job.scale[side]);
          out[e + 1] = nvfp4_dequantize(static_cast<uint8_t>(byte >> 4), scale, job.scale[side]);
        }
      }
      break;
  }
}

float query_element(const TensorView& q, int64_t s, int64_t h, int64_t e) {
  const auto* base = static_cast<const uint8_t*>(q.data);
  const int64_t index = s * q.strides[0] + h * q.strides[1] + e * q.strides[2];
  return q.dtype == DType::bf16 ? load_element<DType::bf16>(base, index)
                                : load_element<DType::f16>(base, index);
}

// Items are (sequence, kv head) pairs: item = s * H + h.
void attend_items(const AttendJob& job, int64_t begin, int64_t end) {
  const kvq_page_desc& d = *job.desc;
  const AttentionArgs& a = *job.args;
  const int64_t H = d.num_kv_heads, D = d.head_size, T = d.block_size;
  const auto Du = static_cast<size_t>(D);
  std::vector<double> k, v, x, q(Du), o(Du);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t s = item / H, h = item % H;
    const int32_t len = a.seq_lens.ptr<const int32_t>()[s * a.seq_lens.strides[0]];
    const int64_t max_tokens = a.block_tables.shape[1] * T;
    // Only valid lengths arrive here (the contract); anything else reads as an empty sequence.
    const int64_t n = len < 0 || len > max_tokens ? 0 : len;
    k.assign(static_cast<size_t>(n) * Du, 0.0);
    v.assign(static_cast<size_t>(n) * Du, 0.0);
    std::vector<bool> present(static_cast<size_t>(n), false);
    for (int64_t j = 0; j < n; ++j) {
      const int32_t id = a.block_tables.ptr<const int32_t>()[s * a.block_tables.strides[0] +
                                                             (j / T) * a.block_tables.strides[1]];
      if (id < 0 || id >= d.num_blocks) continue;  // skipped, as a GPU backend does
      const uint8_t* page = job.cache + static_cast<uint64_t>(id) * d.page_bytes;
      const auto t = static_cast<uint32_t>(j % T);
      decode_row(job, page, t, static_cast<uint32_t>(h), 0, &k[static_cast<size_t>(j) * Du]);
      decode_row(job, page, t, static_cast<uint32_t>(h), 1, &v[static_cast<size_t>(j) * Du]);
      present[static_cast<size_t>(j)] = true;
    }
    for (int64_t qh = h * job.group; qh < (h + 1) * job.group; ++qh) {
      for (int64_t e = 0; e < D; ++e) q[static_cast<size_t>(e)] = query_element(a.query, s, qh, e);
      x.assign(static_cast<size_t>(n), -std::numeric_limits<double>::infinity());
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        if (!present[static_cast<size_t>(j)]) continue;
        double dot = 0.0;
        const double* kj = &k[static_cast<size_t>(j) * Du];
        for (size_t e = 0; e < Du; ++e) dot += q[e] * kj[e];
        x[static_cast<size_t>(j)] = static_cast<double>(a.softmax_scale) * dot;
        top = std::max(top, x[static_cast<size_t>(j)]);
      }
      std::fill(o.begin(), o.end(), 0.0);
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (!present[static_cast<size_t>(j)]) continue;
        const double p = std::exp(x[static_cast<size_t>(j)] - top);
        sum += p;
        const double* vj = &v[static_cast<size_t>(j) * Du];
        for (size_t e = 0; e < Du; ++e) o[e] += p * vj[e];
      }
      const TensorView& out = a.output;
      for (int64_t e = 0; e < D; ++e) {
        const double value = sum > 0.0 ? o[static_cast<size_t>(e)] / sum : 0.0;
        store_element(out.dtype, out.data,
                      s * out.strides[0] + qh * out.strides[1] + e * out.strides[2],
                      static_cast<float>(value));
      }
    }
  }
}

}  // namespace

const kvq_requirements& attention_requirements() {
  static const kvq_requirements needs{
      sizeof(kvq_requirements),
      {kDLCPU, 0},
      (1u << static_cast<uint32_t>(DType::bf16)) | (1u << static_cast<uint32_t>(DType::f16)),
      1,
      KVQ_REQ_HEAD_SCALES,
  };
  return needs;
}

ReferenceAttention::ReferenceAttention(const BackendOptions& options)
    : ReferenceAttention(PageLayout::from_spec(options.cache),
                         check_backend_options(options.device, options.threads)) {}

ReferenceAttention::ReferenceAttention(const PageLayout& layout, int threads)
    : layout_(layout), threads_(threads) {}

Status ReferenceAttention::attend(const AttentionArgs& in) noexcept {
  AttentionArgs args = in;
  if (args.softmax_scale == 0.0f) {
    args.softmax_scale = default_softmax_scale(layout_.geometry().head_size);
  }
  if (Status s = check_attention_args(args, layout_, attention_requirements(), "reference_cpu", 0);
      !s) {
    return s;
  }
  return attend_checked(args);
}

Status ReferenceAttention::attend_checked(const AttentionArgs& args) noexcept {
  return catch_as_status([&] {
    const kvq_page_desc& d = layout_.descriptor();
    // The contract passed: a scale pointer is a host pointer here, its value usable.
    const float k_scale = args.k_scale_ptr != nullptr ? *args.k_scale_ptr : args.k_scale;
    const float v_scale = args.v_scale_ptr != nullptr ? *args.v_scale_ptr : args.v_scale;
    AttendJob job{};
    job.desc = &d;
    job.cache = static_cast<const uint8_t*>(args.cache.data);
    job.args = &args;
    job.scale[0] = k_scale;
    job.scale[1] = v_scale;
    const auto scales =
        side_scales(layout_, k_scale, v_scale, args.k_head_scales, args.v_head_scales);
    job.head_scale[0] = scales[0].data();
    job.head_scale[1] = scales[1].data();
    job.group = args.query.shape[1] / d.num_kv_heads;
    const int64_t items = args.query.shape[0] * d.num_kv_heads;
    parallel_for(items, threads_, 1,
                 [&](int64_t begin, int64_t end) { attend_items(job, begin, end); });
  });
}

Status ReferenceAttention::workspace_bytes(int64_t, int64_t, int64_t,
                                           uint64_t* bytes) const noexcept {
  if (bytes == nullptr) return {ErrorCode::invalid_argument, "bytes: null pointer"};
  *bytes = 0;
  return Status::ok();
}

Status ReferenceAttention::take_out_of_range(AttentionOutOfRange* counts) noexcept {
  if (counts == nullptr) return {ErrorCode::invalid_argument, "counts: null pointer"};
  *counts = AttentionOutOfRange{};
  return Status::ok();
}

}  // namespace kvq::reference_cpu
