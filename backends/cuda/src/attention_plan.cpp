#include "attention_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvq::cuda {
namespace {

constexpr int64_t kMinSplitTokens = 64;  // one tile for each warp: the shortest split
constexpr int64_t kSplitUnit = kAttentionTileTokens * kAttentionWarps;  // 64
// A split call's CTAs fill at most this many waves. Past a few waves more splits gain little
// (the estimate below moves by about 1%), and the cap bounds the partial results of every shape
// by a constant, which workspace_bound() returns.
constexpr int64_t kMaxSplitWaves = 8;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The widest copy (16, 8, 4, 2 or 1 bytes) every data row's pieces start aligned to.
int32_t data_access_bytes(const kvq_page_desc& d, uintptr_t cache) {
  for (int32_t w = 16; w > 1; w /= 2) {
    const auto uw = static_cast<uint64_t>(w);
    bool ok = cache % uw == 0 && d.page_bytes % uw == 0 && d.row_bytes % uw == 0;
    for (const kvq_side_map& m : d.side) {
      ok = ok && m.data_base % uw == 0 && m.data_t % uw == 0 && m.data_h % uw == 0;
    }
    if (ok) return w;
  }
  return 1;
}

// Bytes of `rows` partial results: [rows, head_size] f32 outputs (16-byte aligned), then [rows]
// f32 log-sum-exps.
uint64_t partial_bytes(uint64_t rows, int64_t head_size) {
  return (rows * static_cast<uint64_t>(head_size) * 4 + 15) / 16 * 16 + rows * 4;
}

// The launch limits of a call's shape; its head tiles (ceil(group / 16)) on success.
Status check_shape(const kvq_page_desc& d, int64_t num_seqs, int64_t num_q_heads,
                   int64_t max_blocks, int32_t* head_tiles) {
  if (num_seqs < 0 || num_seqs > 65535) {
    return {ErrorCode::invalid_argument,
            fmt::format("num_seqs {}: expected 0 .. 65535 (cuda attention's grid)", num_seqs)};
  }
  if (num_q_heads < 1 || num_q_heads % d.num_kv_heads != 0) {
    return {ErrorCode::invalid_argument,
            fmt::format("num_q_heads {}: expected a positive multiple of num_kv_heads {}",
                        num_q_heads, d.num_kv_heads)};
  }
  if (max_blocks < 0 || max_blocks > (int64_t{1} << 31) / d.block_size - 1) {
    return {ErrorCode::invalid_argument,
            fmt::format("max_blocks_per_seq {}: expected 0 .. {} (max_blocks_per_seq x "
                        "block_size {} below 2^31 tokens)",
                        max_blocks, (int64_t{1} << 31) / d.block_size - 1, d.block_size)};
  }
  const int64_t group = num_q_heads / d.num_kv_heads;
  const int64_t tiles = ceil_div(group, kAttentionHeadsPerTile);
  if (d.num_kv_heads * tiles > 65535) {
    return {ErrorCode::invalid_argument,
            fmt::format("num_kv_heads {} x head tiles {}: expected <= 65535 (cuda attention's "
                        "grid)",
                        d.num_kv_heads, tiles)};
  }
  *head_tiles = static_cast<int32_t>(tiles);
  return Status::ok();
}

int32_t scale_copy(const kvq_page_desc& d, int side, uintptr_t cache) {
  if (d.format != KVQ_FORMAT_NVFP4) return kScalesNone;
  const kvq_side_map& m = d.side[side];
  const bool words =
      cache % 4 == 0 && d.page_bytes % 4 == 0 && m.scale_base % 4 == 0 && d.groups % 4 == 0;
  if (!words) return kScalesBytes;
  return d.scales[side] == KVQ_SCALES_SM100_SWIZZLED ? kScalesQuadWords : kScalesLinearWords;
}

}  // namespace

Status check_attention_geometry(const kvq_page_desc& d) noexcept {
  if (std::find(std::begin(kAttentionHeadSizes), std::end(kAttentionHeadSizes), d.head_size) ==
      std::end(kAttentionHeadSizes)) {
    return {ErrorCode::invalid_argument,
            fmt::format("cuda attention: head_size {}: expected 64, 128 or 256 (the head sizes "
                        "its kernels are built for)",
                        d.head_size),
            "cache.head_size"};
  }
  if (d.num_blocks >= (int64_t{1} << 31)) {
    return {ErrorCode::invalid_argument,
            fmt::format("cuda attention: num_blocks {}: expected < 2^31 (block ids are int32)",
                        d.num_blocks),
            "cache.num_blocks"};
  }
  return Status::ok();
}

Status plan_splits(const kvq_page_desc& d, int64_t num_seqs, int64_t num_q_heads,
                   int64_t max_blocks, int32_t target_ctas, SplitPlan* out) noexcept {
  SplitPlan p;
  if (Status s = check_shape(d, num_seqs, num_q_heads, max_blocks, &p.head_tiles); !s) return s;
  const int64_t items = num_seqs * d.num_kv_heads * p.head_tiles;
  const int64_t max_tokens = std::max<int64_t>(1, max_blocks * d.block_size);
  const int64_t waves_of = std::max<int32_t>(1, target_ctas);
  // The split count with the least estimated time: waves of resident CTAs times the tokens one
  // CTA attends (plus a fixed cost worth kCtaOverheadTokens), so the grid fills whole waves: one
  // sequence gets about one wave of splits, and many sequences get a few splits when that
  // avoids a last wave that is mostly empty.
  constexpr int64_t kCtaOverheadTokens = 64;
  const int64_t max_splits =
      std::min({ceil_div(max_tokens, kMinSplitTokens), int64_t{kAttentionMaxSplits},
                std::max<int64_t>(1, kMaxSplitWaves * waves_of / std::max<int64_t>(1, items))});
  int64_t best_tokens = ceil_div(max_tokens, kSplitUnit) * kSplitUnit;
  int64_t best_cost = ceil_div(items, waves_of) * (best_tokens + kCtaOverheadTokens);
  for (int64_t want = 2; items > 0 && want <= max_splits; ++want) {
    const int64_t tokens = ceil_div(ceil_div(max_tokens, want), kSplitUnit) * kSplitUnit;
    const int64_t splits = ceil_div(max_tokens, tokens);
    const int64_t cost = ceil_div(items * splits, waves_of) * (tokens + kCtaOverheadTokens);
    if (cost < best_cost) {
      best_cost = cost;
      best_tokens = tokens;
    }
  }
  p.num_splits = static_cast<int32_t>(ceil_div(max_tokens, best_tokens));
  p.split_tokens = static_cast<int32_t>(best_tokens);
  if (p.num_splits > 1) {
    p.workspace_bytes = partial_bytes(
        static_cast<uint64_t>(num_seqs) * static_cast<uint64_t>(num_q_heads) * p.num_splits,
        d.head_size);
  }
  *out = p;
  return Status::ok();
}

Status workspace_bound(const kvq_page_desc& d, int64_t num_seqs, int64_t num_q_heads,
                       int64_t max_blocks, int32_t target_ctas, uint64_t* bytes) noexcept {
  int32_t tiles = 1;
  if (Status s = check_shape(d, num_seqs, num_q_heads, max_blocks, &tiles); !s) return s;
  *bytes = 0;
  const int64_t max_tokens = max_blocks * d.block_size;
  if (num_seqs == 0 || max_tokens <= kMinSplitTokens) return Status::ok();  // nothing splits
  // A plan of S' <= num_seqs sequences and at most max_tokens tokens has S' x num_q_heads x
  // splits rows, with splits <= ceil(max_tokens / 64) and <= 1024; and, where it splits at all,
  // splits <= kMaxSplitWaves x target / (S' x num_kv_heads x tiles), so its rows are at most
  // kMaxSplitWaves x target x num_q_heads / (num_kv_heads x tiles), whatever S'.
  const auto by_shape = static_cast<uint64_t>(num_seqs) * static_cast<uint64_t>(num_q_heads) *
                        static_cast<uint64_t>(std::min(ceil_div(max_tokens, kMinSplitTokens),
                                                       int64_t{kAttentionMaxSplits}));
  const auto by_waves = static_cast<uint64_t>(kMaxSplitWaves * std::max<int32_t>(1, target_ctas) *
                                              num_q_heads / (d.num_kv_heads * tiles));
  *bytes = partial_bytes(std::min(by_shape, by_waves), d.head_size);
  return Status::ok();
}

Status plan_attention(const AttentionArgs& a, const kvq_page_desc& d, const SplitPlan& plan,
                      AttentionCounters* counters, AttentionKernelDesc* out) noexcept {
  AttentionKernelDesc k{};
  const auto cache = reinterpret_cast<uintptr_t>(a.cache.data);
  k.cache = static_cast<const uint8_t*>(a.cache.data);
  k.page_bytes = d.page_bytes;
  k.num_blocks = static_cast<int32_t>(d.num_blocks);
  k.block_div = FastDivmod::make(static_cast<uint32_t>(d.block_size));
  k.side[0] = d.side[0];
  k.side[1] = d.side[1];
  k.data_access = data_access_bytes(d, cache);
  k.scale_copy[0] = scale_copy(d, 0, cache);
  k.scale_copy[1] = scale_copy(d, 1, cache);
  k.num_kv_heads = static_cast<int32_t>(d.num_kv_heads);
  k.num_q_heads = static_cast<int32_t>(a.query.shape[1]);
  k.group = static_cast<int32_t>(a.query.shape[1] / d.num_kv_heads);
  k.head_tiles = plan.head_tiles;
  k.query = static_cast<const uint16_t*>(a.query.data);
  k.block_tables = static_cast<const int32_t*>(a.block_tables.data);
  k.seq_lens = static_cast<const int32_t*>(a.seq_lens.data);
  k.output = a.output.data;
  for (int i = 0; i < 3; ++i) {
    k.query_stride[i] = a.query.strides[i];
    k.output_stride[i] = a.output.strides[i];
  }
  k.table_stride[0] = a.block_tables.strides[0];
  k.table_stride[1] = a.block_tables.strides[1];
  k.max_blocks = static_cast<int32_t>(a.block_tables.shape[1]);
  k.seq_len_stride = a.seq_lens.strides[0];
  k.output_type = a.output.dtype == DType::bf16  ? kOutBf16
                  : a.output.dtype == DType::f16 ? kOutF16
                                                 : kOutF32;
  k.k_scale = a.k_scale;
  k.v_scale = a.v_scale;
  k.k_scale_ptr = a.k_scale_ptr;
  k.v_scale_ptr = a.v_scale_ptr;
  k.k_head_scales = static_cast<const float*>(a.k_head_scales.data);
  k.v_head_scales = static_cast<const float*>(a.v_head_scales.data);
  k.softmax_scale_log2 = static_cast<float>(static_cast<double>(a.softmax_scale) * M_LOG2E);
  k.num_splits = plan.num_splits;
  k.split_tokens = plan.split_tokens;
  if (plan.num_splits > 1) {
    const uint64_t partials = static_cast<uint64_t>(a.query.shape[0]) *
                              static_cast<uint64_t>(a.query.shape[1]) * plan.num_splits;
    auto* base = static_cast<uint8_t*>(a.workspace.data);
    const uint64_t out_bytes = partials * static_cast<uint64_t>(d.head_size) * 4;
    k.partial_out = reinterpret_cast<float*>(base);
    k.partial_lse = reinterpret_cast<float*>(base + (out_bytes + 15) / 16 * 16);
  }
  k.counters = counters;
  *out = k;
  return Status::ok();
}

}  // namespace kvq::cuda
