// The cuda decode attention against reference_cpu's (the definition, f64): max abs error within
// 2e-3 x the output's max magnitude on random cases (sequence lengths 1..70000, pages in random
// order, GQA 1/4/8, head sizes 64/128/256, every format and layout, bf16 and f16 queries, every
// output dtype); device-side block ids and seq_lens out of range skipped and counted; a decode
// step (the cuda writer's write of the new tokens, then attention) captured as one CUDA graph.
// Every test skips with a message where there is no CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attention_case.h"
#include "cuda_attention.h"
#include "gpu_test_support.h"
#include "kvq/core/contract.h"
#include "kvq/reference_cpu/reference_attention.h"

namespace kvq::cuda::test {
namespace {

using kvq::test::AttentionCase;
using kvq::test::AttentionShape;

struct LayoutWords {
  const char* format;
  const char* order;
  const char* k_scales;
  const char* v_scales;
};

const LayoutWords kLayouts[] = {
    {"nvfp4", "HND", "linear", "sm100_swizzled"},
    {"nvfp4", "NHD", "linear", "linear"},
    {"nvfp4", "HND", "sm100_swizzled", "sm100_swizzled"},
    {"nvfp4", "NHD", "sm100_swizzled", "linear"},
    {"nvfp4", "HND", "linear", "linear"},
    {"fp8_e4m3", "HND", "", ""},
    {"fp8_e4m3", "NHD", "", ""},
    {"fp8_e5m2", "HND", "", ""},
    {"fp8_e5m2", "NHD", "", ""},
    {"bf16", "HND", "", ""},
    {"bf16", "NHD", "", ""},
};

std::unique_ptr<CudaAttention> make_attention(const CacheSpec& spec) {
  CudaAttention* a = nullptr;
  const Status s = CudaAttention::create(PageLayout::from_spec(spec), Device::cuda(0), &a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return std::unique_ptr<CudaAttention>(a);
}

float output_value(const std::vector<uint8_t>& bytes, DType t, size_t i) {
  uint16_t h;
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    case DType::bf16: std::memcpy(&h, bytes.data() + 2 * i, 2); return bf16_to_float(h);
    default: std::memcpy(&h, bytes.data() + 2 * i, 2); return kvq::test::attention_f16_to_float(h);
  }
}

// The case's tensors on the device, and the args of an attend over them.
struct DeviceAttention {
  DeviceBuffer cache, query, tables, lens, output, workspace;
  AttentionArgs args;
};

// `cache_offset` bytes past an aligned pointer: 2, 4 or 8 take the kernel's narrower copies.
DeviceAttention upload(const AttentionCase& c, const PageLayout& layout, DType out_dtype,
                       uint64_t workspace_bytes, size_t cache_offset = 0) {
  DeviceAttention d;
  const Device dev = Device::cuda(0);
  d.cache = DeviceBuffer(c.cache.size() + cache_offset);
  d.cache.upload(c.cache.data(), c.cache.size(), cache_offset);
  d.query = DeviceBuffer(c.query.size() * 2);
  d.query.upload(c.query);
  d.tables = DeviceBuffer(std::max<size_t>(4, c.block_tables.size() * 4));
  if (!c.block_tables.empty()) d.tables.upload(c.block_tables);
  d.lens = DeviceBuffer(std::max<size_t>(4, c.seq_lens.size() * 4));
  if (!c.seq_lens.empty()) d.lens.upload(c.seq_lens);
  const int64_t D = c.shape.head_size;
  d.output = DeviceBuffer(static_cast<size_t>(c.num_seqs * c.num_q_heads * D) *
                          static_cast<size_t>(dtype_size(out_dtype)));
  if (workspace_bytes > 0) d.workspace = DeviceBuffer(workspace_bytes);
  AttentionArgs& a = d.args;
  a.query = make_view(d.query.get(), c.shape.query_dtype, {c.num_seqs, c.num_q_heads, D}, dev);
  a.block_tables = make_view(d.tables.get(), DType::i32, {c.num_seqs, c.max_blocks}, dev);
  a.seq_lens = make_view(d.lens.get(), DType::i32, {c.num_seqs}, dev);
  a.cache = cache_view(layout, static_cast<uint8_t*>(d.cache.get()) + cache_offset, dev);
  a.output = make_view(d.output.get(), out_dtype, {c.num_seqs, c.num_q_heads, D}, dev);
  if (workspace_bytes > 0) {
    a.workspace =
        make_view(d.workspace.get(), DType::u8, {static_cast<int64_t>(workspace_bytes)}, dev);
  }
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  return d;
}

// The reference's output for the case (f64, stored f32), computed by attend_checked so that
// out-of-range device-style values are skipped as the GPU skips them; with per-head scales
// ([num_kv_heads] each) where given.
std::vector<double> reference_output(AttentionCase& c, std::vector<float>* k_heads = nullptr,
                                     std::vector<float>* v_heads = nullptr) {
  const PageLayout layout = PageLayout::from_spec(c.spec);
  reference_cpu::ReferenceAttention ref(layout, 0);
  std::vector<float> out;
  AttentionArgs a = kvq::test::host_attention_args(c, layout, &out);
  a.softmax_scale = default_softmax_scale(c.shape.head_size);
  const int64_t H = c.shape.num_kv_heads;
  if (k_heads != nullptr) {  // per-head scales stand alone: the per-tensor values are 1
    a.k_head_scales = make_view(k_heads->data(), DType::f32, {H});
    a.k_scale = 1.0f;
  }
  if (v_heads != nullptr) {
    a.v_head_scales = make_view(v_heads->data(), DType::f32, {H});
    a.v_scale = 1.0f;
  }
  const Status s = ref.attend_checked(a);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return {out.begin(), out.end()};
}

// "" when the GPU output is within 2e-3 x max |reference| of the reference (plus the rounding
// of a bf16 / f16 output), else the worst element.
std::string compare(const std::vector<uint8_t>& got, DType dtype, const std::vector<double>& want) {
  double top = 0.0;
  for (double w : want) top = std::max(top, std::fabs(w));
  const double ulp = dtype == DType::bf16 ? 1.0 / 256 : dtype == DType::f16 ? 1.0 / 2048 : 0.0;
  double worst = -1.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = output_value(got, dtype, i);
    const double bound = 2e-3 * top + ulp * std::fabs(want[i]);
    const double excess = std::isnan(g) ? 1e30 : std::fabs(g - want[i]) - bound;
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  if (worst <= 0.0) return "";
  return fmt::format("output[{}] = {} vs reference {} (max |reference| {}, bound {})", at,
                     output_value(got, dtype, at), want[at], top,
                     2e-3 * top + ulp * std::fabs(want[at]));
}

AttentionShape random_shape(std::mt19937_64& rng, int i) {
  AttentionShape s;
  const LayoutWords& l = kLayouts[static_cast<size_t>(i) % std::size(kLayouts)];
  s.format = l.format;
  s.order = l.order;
  s.k_scales = l.k_scales;
  s.v_scales = l.v_scales;
  const int64_t groups[3] = {1, 4, 8};
  const int64_t sizes[3] = {64, 128, 256};
  s.group = i % 25 == 24 ? 20 : groups[(i / 3) % 3];  // 20: two head tiles of a kv head
  s.head_size = sizes[i % 3];
  const int64_t blocks[4] = {16, 32, 8, 64};
  s.block_size = blocks[(i / 5) % 4];
  s.query_dtype = i % 2 == 0 ? DType::bf16 : DType::f16;
  s.query_gain = (i % 4 == 0) ? 3.0f : 1.0f;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Lengths: mostly short, some thousands, every tenth case one near 70000 (one kv head then,
  // to keep the reference's time reasonable).
  const int seqs = 1 + static_cast<int>(rng() % 4);
  for (int q = 0; q < seqs; ++q) {
    const double u = unit(rng);
    int32_t len =
        u < 0.5 ? 1 + static_cast<int32_t>(rng() % 600) : 600 + static_cast<int32_t>(rng() % 7400);
    if (q == 0 && i % 10 == 9) len = 60000 + static_cast<int32_t>(rng() % 10001);
    if (q == 0 && i % 10 == 3) len = 1 + static_cast<int32_t>(rng() % 16);
    s.seq_lens.push_back(len);
  }
  s.num_kv_heads = i % 10 == 9 ? 1 : 1 + static_cast<int64_t>(rng() % 3);
  s.extra_table_blocks = static_cast<int64_t>(rng() % 3);
  return s;
}

TEST(GpuAttention, MatchesTheReferenceOnRandomCases) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(4242);
  const DType outs[3] = {DType::f32, DType::bf16, DType::f16};
  const auto t0 = std::chrono::steady_clock::now();
  int cases = 0;
  for (int i = 0; i < 110; ++i) {
    const AttentionShape shape = random_shape(rng, i);
    AttentionCase c = kvq::test::make_attention_case(shape, 1000 + static_cast<uint64_t>(i));
    const DType out_dtype = outs[(i / 7) % 3];
    SCOPED_TRACE(fmt::format("case {}: {}, output {}", i, c.describe(), dtype_name(out_dtype)));
    auto attention = make_attention(c.spec);
    ASSERT_TRUE(attention);
    uint64_t ws = 0;
    ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    DeviceAttention d = upload(c, layout, out_dtype, ws);
    ASSERT_FALSE(HasFatalFailure());
    Stream stream;
    d.args.stream = stream.get();
    const Status s = attention->attend(d.args);
    ASSERT_TRUE(s.is_ok()) << s.message();
    check_cuda(cudaStreamSynchronize(stream.get()), "attend");
    std::vector<uint8_t> got(d.output.bytes());
    d.output.download(got.data(), got.size());
    const std::vector<double> want = reference_output(c);
    EXPECT_EQ(compare(got, out_dtype, want), "");
    AttentionOutOfRange counts;
    ASSERT_TRUE(attention->take_out_of_range(&counts).is_ok());
    EXPECT_EQ(counts.block_ids, 0);
    EXPECT_EQ(counts.seq_lens, 0);
    ++cases;
  }
  std::printf("[ ATTN     ] %d random cases in %.1f s\n", cases,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(GpuAttention, OneLongSequenceIsSplitAndMatches) {
  KVQ_REQUIRE_CUDA_DEVICE();
  AttentionShape shape;
  shape.num_kv_heads = 8;
  shape.group = 8;
  shape.seq_lens = {70000};
  AttentionCase c = kvq::test::make_attention_case(shape, 5);
  auto attention = make_attention(c.spec);
  ASSERT_TRUE(attention);
  SplitPlan plan;
  ASSERT_TRUE(attention->plan(c.num_seqs, c.num_q_heads, c.max_blocks, &plan).is_ok());
  EXPECT_GT(plan.num_splits, 1);
  // The workspace attend() asks for is workspace_bytes(), a bound over every call of this shape;
  // this call's plan fits in it.
  uint64_t ws = 0;
  ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
  EXPECT_LE(plan.workspace_bytes, ws);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  DeviceAttention d = upload(c, layout, DType::f32, ws);
  const Status s = attention->attend(d.args);
  ASSERT_TRUE(s.is_ok()) << s.message();
  check_cuda(cudaDeviceSynchronize(), "attend");
  std::vector<uint8_t> got(d.output.bytes());
  d.output.download(got.data(), got.size());
  EXPECT_EQ(compare(got, DType::f32, reference_output(c)), "") << plan.num_splits << " splits";
}

TEST(GpuAttention, MisalignedCachesTakeNarrowerCopiesAndMatch) {
  KVQ_REQUIRE_CUDA_DEVICE();
  uint64_t seed = 50;
  for (const LayoutWords& l : {kLayouts[0], kLayouts[1], kLayouts[2], kLayouts[5], kLayouts[9]}) {
    for (size_t offset : {1, 2, 4, 8}) {
      AttentionShape shape;
      shape.format = l.format;
      shape.order = l.order;
      shape.k_scales = l.k_scales;
      shape.v_scales = l.v_scales;
      shape.group = 8;
      shape.seq_lens = {700, 33};
      AttentionCase c = kvq::test::make_attention_case(shape, seed++);
      SCOPED_TRACE(
          fmt::format("{}, cache pointer {} bytes past an aligned one", c.describe(), offset));
      auto attention = make_attention(c.spec);
      ASSERT_TRUE(attention);
      uint64_t ws = 0;
      ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
      const PageLayout layout = PageLayout::from_spec(c.spec);
      DeviceAttention d = upload(c, layout, DType::f32, ws, offset);
      ASSERT_TRUE(attention->attend(d.args).is_ok());
      check_cuda(cudaDeviceSynchronize(), "attend");
      std::vector<uint8_t> got(d.output.bytes());
      d.output.download(got.data(), got.size());
      EXPECT_EQ(compare(got, DType::f32, reference_output(c)), "");
    }
  }
}

TEST(GpuAttention, DeviceValuesOutOfRangeAreSkippedAndCounted) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (int64_t length : {40, 3000}) {  // one split and several
    AttentionShape shape;
    shape.seq_lens = {static_cast<int32_t>(length), 50, 70, 20};
    AttentionCase c = kvq::test::make_attention_case(shape, 17);
    SCOPED_TRACE(c.describe());
    // Sequence 0: its second page id past the cache; sequence 1: its first page id negative;
    // sequence 2: a length past its table; sequence 3: a bad id in an entry past its length
    // (never read, not counted).
    c.block_tables[static_cast<size_t>(0 * c.max_blocks + 1)] =
        static_cast<int32_t>(c.spec.num_blocks + 5);
    c.block_tables[static_cast<size_t>(1 * c.max_blocks + 0)] = -3;
    c.seq_lens[2] = static_cast<int32_t>(c.max_blocks * shape.block_size + 1);
    c.block_tables[static_cast<size_t>(3 * c.max_blocks + c.max_blocks - 1)] = 1 << 30;
    auto attention = make_attention(c.spec);
    ASSERT_TRUE(attention);
    uint64_t ws = 0;
    ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    DeviceAttention d = upload(c, layout, DType::f32, ws);
    ASSERT_TRUE(attention->attend(d.args).is_ok());
    std::vector<uint8_t> got(d.output.bytes());
    d.output.download(got.data(), got.size());
    EXPECT_EQ(compare(got, DType::f32, reference_output(c)), "");
    AttentionOutOfRange counts;
    ASSERT_TRUE(attention->take_out_of_range(&counts).is_ok());
    EXPECT_EQ(counts.block_ids, 2);
    EXPECT_EQ(counts.seq_lens, 1);
    ASSERT_TRUE(attention->take_out_of_range(&counts).is_ok());
    EXPECT_EQ(counts.block_ids, 0) << "a take resets the counts";
  }
}

// Scales read on the device: a k_scale_ptr / v_scale_ptr pair and per-head scales give the
// reference's output; a value outside the scale rule leaves its (sequence, kv head) out (zeros)
// and is counted once per sequence and kv head.
TEST(GpuAttention, DeviceScalesAreReadAndUnusableOnesCounted) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (int64_t length : {40, 3000}) {  // one split and several
    AttentionShape shape;
    shape.format = "fp8_e4m3";
    shape.num_kv_heads = 4;
    shape.group = 4;
    shape.seq_lens = {static_cast<int32_t>(length), 90, 1};
    AttentionCase c = kvq::test::make_attention_case(shape, 23);
    SCOPED_TRACE(c.describe());
    const int64_t H = shape.num_kv_heads, D = shape.head_size;
    auto attention = make_attention(c.spec);
    ASSERT_TRUE(attention);
    uint64_t ws = 0;
    ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
    const PageLayout layout = PageLayout::from_spec(c.spec);
    DeviceAttention d = upload(c, layout, DType::f32, ws);
    auto run = [&](const std::vector<double>& want, int64_t unusable) {
      ASSERT_TRUE(attention->attend(d.args).is_ok());
      std::vector<uint8_t> got(d.output.bytes());
      d.output.download(got.data(), got.size());
      EXPECT_EQ(compare(got, DType::f32, want), "");
      AttentionOutOfRange counts;
      ASSERT_TRUE(attention->take_out_of_range(&counts).is_ok());
      EXPECT_EQ(counts.scales, unusable);
      EXPECT_EQ(counts.block_ids, 0);
    };
    // The pair, usable, then k's NaN: every (sequence, kv head) left out.
    DeviceBuffer pair(8);
    pair.upload(std::vector<float>{c.k_scale, c.v_scale});
    d.args.k_scale_ptr = static_cast<const float*>(pair.get());
    d.args.v_scale_ptr = d.args.k_scale_ptr + 1;
    run(reference_output(c), 0);
    pair.upload(std::vector<float>{std::nanf(""), c.v_scale});
    run(std::vector<double>(static_cast<size_t>(c.num_seqs * c.num_q_heads * D), 0.0),
        c.num_seqs * H);
    d.args.k_scale_ptr = d.args.v_scale_ptr = nullptr;
    d.args.k_scale = d.args.v_scale = 1.0f;
    // Per-head scales, usable, then head 2's V scale negative: its query heads get zeros.
    std::vector<float> k_heads(static_cast<size_t>(H)), v_heads(k_heads.size());
    for (int64_t h = 0; h < H; ++h) {
      k_heads[static_cast<size_t>(h)] = c.k_scale * (1.0f + 0.25f * static_cast<float>(h));
      v_heads[static_cast<size_t>(h)] = c.v_scale * (1.0f - 0.125f * static_cast<float>(h));
    }
    DeviceBuffer heads(static_cast<size_t>(2 * H) * 4);
    auto put = [&] {
      std::vector<float> both(k_heads);
      both.insert(both.end(), v_heads.begin(), v_heads.end());
      heads.upload(both);
    };
    put();
    const Device dev = Device::cuda(0);
    d.args.k_head_scales = make_view(heads.get(), DType::f32, {H}, dev);
    d.args.v_head_scales = make_view(static_cast<float*>(heads.get()) + H, DType::f32, {H}, dev);
    std::vector<double> want = reference_output(c, &k_heads, &v_heads);
    run(want, 0);
    v_heads[2] = -1.0f;
    put();
    for (int64_t s = 0; s < c.num_seqs; ++s) {
      for (int64_t q = 2 * shape.group; q < 3 * shape.group; ++q) {
        for (int64_t e = 0; e < D; ++e)
          want[static_cast<size_t>((s * c.num_q_heads + q) * D + e)] = 0;
      }
    }
    run(want, c.num_seqs);
  }
}

TEST(GpuAttention, RefusesATooSmallWorkspaceWithNothingLaunched) {
  KVQ_REQUIRE_CUDA_DEVICE();
  AttentionShape shape;
  shape.seq_lens = {20000};
  AttentionCase c = kvq::test::make_attention_case(shape, 3);
  auto attention = make_attention(c.spec);
  ASSERT_TRUE(attention);
  uint64_t ws = 0;
  ASSERT_TRUE(attention->workspace_bytes(c.num_seqs, c.num_q_heads, c.max_blocks, &ws).is_ok());
  ASSERT_GT(ws, 0u);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  DeviceAttention d = upload(c, layout, DType::f32, ws);
  d.args.workspace.shape[0] = static_cast<int64_t>(ws) - 1;
  const Status s = attention->attend(d.args);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.message().find("workspace: " + std::to_string(ws - 1) + " bytes: expected at least"),
            std::string::npos)
      << s.message();
}

// A decode step as an engine runs it: the new token of every sequence written by the cuda writer
// (nvfp4), then attention over the pages, both captured into one graph; replays give the
// reference's output for the cache with the tokens written.
// A decode step -- the write of each sequence's new token, then attention over the pages with
// it -- captured as one CUDA graph and replayed, in one cache format.
void write_then_attend_as_one_graph(const std::string& format) {
  AttentionShape shape;
  shape.format = format;
  shape.num_kv_heads = 4;
  shape.group = 4;
  shape.seq_lens = {300, 5000, 1, 77};
  AttentionCase full = kvq::test::make_attention_case(shape, 21);
  // The cache before the step: the same pages without each sequence's last token.
  const PageLayout layout = PageLayout::from_spec(full.spec);
  const int64_t H = shape.num_kv_heads, D = shape.head_size;
  std::vector<int64_t> last_rows, last_slots;
  {
    int64_t first = 0;
    for (int64_t s = 0; s < full.num_seqs; ++s) {
      first += full.seq_lens[static_cast<size_t>(s)];
      last_rows.push_back(first - 1);
      last_slots.push_back(full.slots[static_cast<size_t>(first - 1)]);
    }
  }
  std::vector<uint8_t> before = full.cache;
  for (int64_t slot : last_slots) {  // scramble the new tokens' bytes: the write must fill them
    const int64_t page = slot / shape.block_size, t = slot % shape.block_size;
    for (int side = 0; side < 2; ++side) {
      for (int64_t h = 0; h < H; ++h) {
        const auto off = static_cast<size_t>(page) * layout.page_bytes() +
                         layout.data_offset(side == 0 ? Side::k : Side::v, t, h, 0);
        for (uint64_t b = 0; b < layout.descriptor().row_bytes; ++b) before[off + b] ^= 0x5Au;
      }
    }
  }
  std::vector<uint16_t> new_k(static_cast<size_t>(full.num_seqs * H * D)), new_v(new_k.size());
  for (size_t s = 0; s < last_rows.size(); ++s) {
    for (int64_t e = 0; e < H * D; ++e) {
      const auto src = static_cast<size_t>(last_rows[s] * H * D + e);
      new_k[s * static_cast<size_t>(H * D) + static_cast<size_t>(e)] = float_to_bf16(full.key[src]);
      new_v[s * static_cast<size_t>(H * D) + static_cast<size_t>(e)] =
          float_to_bf16(full.value[src]);
    }
  }
  AttentionCase stale = full;
  stale.cache = before;
  auto attention = make_attention(full.spec);
  ASSERT_TRUE(attention);
  auto writer = make_writer(full.spec);
  ASSERT_TRUE(writer);
  uint64_t ws = 0;
  ASSERT_TRUE(
      attention->workspace_bytes(full.num_seqs, full.num_q_heads, full.max_blocks, &ws).is_ok());
  DeviceAttention d = upload(stale, layout, DType::bf16, ws);
  DeviceBuffer k_dev(new_k.size() * 2), v_dev(new_v.size() * 2), slots_dev(last_slots.size() * 8);
  k_dev.upload(new_k);
  v_dev.upload(new_v);
  slots_dev.upload(last_slots);
  const Device dev = Device::cuda(0);
  WriteArgs w;
  w.key = make_view(k_dev.get(), DType::bf16, {full.num_seqs, H, D}, dev);
  w.value = make_view(v_dev.get(), DType::bf16, {full.num_seqs, H, D}, dev);
  w.slot_mapping = make_view(slots_dev.get(), DType::i64, {full.num_seqs}, dev);
  w.cache = d.args.cache;
  w.k_scale = full.k_scale;
  w.v_scale = full.v_scale;
  Stream stream;
  w.stream = d.args.stream = stream.get();
  Status wrote, attended;
  const CapturedGraph graph(stream.get(), [&] {
    wrote = writer->write(w);
    attended = attention->attend(d.args);
  });
  ASSERT_TRUE(wrote.is_ok()) << wrote.message();
  ASSERT_TRUE(attended.is_ok()) << attended.message();
  ASSERT_NE(graph.exec(), nullptr);
  const std::vector<double> want = reference_output(full);
  for (int replay = 0; replay < 3; ++replay) {
    check_cuda(cudaGraphLaunch(graph.exec(), stream.get()), "cudaGraphLaunch");
    check_cuda(cudaStreamSynchronize(stream.get()), "replay");
    std::vector<uint8_t> got(d.output.bytes());
    d.output.download(got.data(), got.size());
    EXPECT_EQ(compare(got, DType::bf16, want), "") << "replay " << replay;
  }
  EXPECT_EQ(d.cache.download_all<uint8_t>(), full.cache) << "the write's bytes";
}

TEST(GpuAttention, WriteThenAttendCapturedAsOneGraph) {
  KVQ_REQUIRE_CUDA_DEVICE();
  for (const char* format : {"nvfp4", "fp8_e4m3", "fp8_e5m2", "bf16"}) {
    SCOPED_TRACE(format);
    write_then_attend_as_one_graph(format);
  }
}

}  // namespace
}  // namespace kvq::cuda::test
