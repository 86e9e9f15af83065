// GpuAttention (apps/kvq-demo/gpu_attention.h) through reference_cpu's attention (label plugin):
// the class drives any backend's attention through its runtime, so its staging, head slicing and
// gathering run here without a GPU. Split into head shards it gives exactly what one attention
// over every head gives, and that is f32 attention on the rows the reader gives back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "gpu_attention.h"
#include "kv_generator.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/registry.h"
#include "sequence_scheduler.h"
#include "sharded_cache.h"

namespace kvq::demo {
namespace {

constexpr int64_t kHeads = 4, kDim = 64, kBlocks = 6, kBlockSize = 8, kGroup = 3;

BackendOptions options() {
  BackendOptions o;
  o.cache.layout = {"HND", "linear", "sm100_swizzled"};
  o.cache.num_blocks = kBlocks;
  o.cache.block_size = kBlockSize;
  o.cache.num_kv_heads = kHeads;
  o.cache.head_size = kDim;
  o.cache.k_scale = 0.5f;
  o.cache.v_scale = 2.0f;
  o.device = Device::cpu();
  return o;
}

std::vector<int64_t> slots_of(const Sequence& s) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < s.length; ++p) {
    out.push_back(s.block_table[static_cast<std::size_t>(p / kBlockSize)] * kBlockSize +
                  p % kBlockSize);
  }
  return out;
}

TEST(GpuAttentionShards, HeadShardsAttendAsOneAttentionOverEveryHead) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  ASSERT_TRUE(backend.has_attention());

  // Two sequences in pages out of order: 11 tokens in blocks 5, 1; 3 tokens in block 0.
  Sequence a, b;
  a.id = 0;
  a.length = 11;
  a.block_table = {5, 1};
  b.id = 1;
  b.length = 3;
  b.block_table = {0};
  const StepTables tables = build_step_tables({&a, &b}, kBlockSize);
  const int64_t row = kHeads * kDim, q_heads = kHeads * kGroup;

  KvGenerator gen(11, kHeads, kDim);
  std::vector<uint16_t> query(static_cast<std::size_t>(2 * q_heads * kDim));
  std::vector<float> qf(query.size());
  for (const Sequence* s : {&a, &b}) {
    gen.queries(s->id, s->length - 1, kGroup, qf.data() + s->id * q_heads * kDim);
  }
  for (std::size_t i = 0; i < qf.size(); ++i) {
    query[i] = bf16_from_float(qf[i]);
    qf[i] = bf16_to_float(query[i]);
  }

  std::vector<std::vector<float>> outputs;
  std::vector<float> read_k, read_v;
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE(shards);
    ShardedCache cache(backend, options(), shards, 11, 11);
    for (const Sequence* s : {&a, &b}) {
      std::vector<float> k(static_cast<std::size_t>(s->length * row)), v(k.size());
      gen.rows(s->id, 0, s->length, k.data(), v.data());
      std::vector<uint16_t> kb(k.size()), vb(v.size());
      for (std::size_t i = 0; i < k.size(); ++i) {
        kb[i] = bf16_from_float(k[i]);
        vb[i] = bf16_from_float(v[i]);
      }
      const std::vector<int64_t> slots = slots_of(*s);
      cache.write(kb.data(), vb.data(), slots.data(), s->length);
    }
    GpuAttention attention(backend, options(), cache, kGroup, 3, 2);
    EXPECT_EQ(attention.num_shards(), shards);
    EXPECT_GE(attention.attend(query.data(), tables), 0.0);
    std::vector<float> out(query.size(), -7.0f);
    attention.output(out.data());
    outputs.push_back(out);
    const AttentionOutOfRange skipped = attention.take_out_of_range();
    EXPECT_EQ(skipped.block_ids, 0);
    EXPECT_EQ(skipped.seq_lens, 0);
    // Each shard reads its heads' rows and query heads, and the whole tables.
    uint64_t bytes = 0;
    for (int64_t sh = 0; sh < shards; ++sh) {
      bytes += attention_bytes(cache.layout(sh), q_heads / shards, tables);
    }
    EXPECT_EQ(attention.bytes(tables), bytes);
    if (shards == 1) {
      EXPECT_EQ(bytes, attention_bytes(PageLayout::from_spec(options().cache), q_heads, tables));
      // The reference: f32 attention on what the reader gives back of each sequence.
      std::vector<float> ref(static_cast<std::size_t>(q_heads * kDim));
      for (const Sequence* s : {&a, &b}) {
        read_k.resize(static_cast<std::size_t>(s->length * row));
        read_v.resize(read_k.size());
        const std::vector<int64_t> slots = slots_of(*s);
        cache.read(slots.data(), s->length, read_k.data(), read_v.data());
        gqa_decode_attention(AttentionShape{s->length, kHeads, kDim, kGroup},
                             qf.data() + s->id * q_heads * kDim, read_k.data(), read_v.data(),
                             ref.data());
        for (int64_t i = 0; i < q_heads * kDim; ++i) {
          const float got = out[static_cast<std::size_t>(s->id * q_heads * kDim + i)];
          EXPECT_NEAR(got, ref[static_cast<std::size_t>(i)],
                      1e-4f * (1.0f + std::fabs(ref[static_cast<std::size_t>(i)])))
              << "sequence " << s->id << " element " << i;
        }
      }
    }
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
}

// A step wider than the buffers the attention was made for is the demo's bug, refused before
// anything runs.
TEST(GpuAttentionShards, RefusesAStepLargerThanItsBuffers) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  ShardedCache cache(backend, options(), 1, 4, 4);
  GpuAttention attention(backend, options(), cache, 1, 1, 1);
  Sequence a;
  a.length = 9;
  a.block_table = {0, 1};
  const StepTables tables = build_step_tables({&a}, kBlockSize);
  std::vector<uint16_t> query(static_cast<std::size_t>(kHeads * kDim));
  try {
    attention.attend(query.data(), tables);
    FAIL() << "attended 2 blocks with buffers for 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::internal) << e.what();
  }
}

}  // namespace
}  // namespace kvq::demo
