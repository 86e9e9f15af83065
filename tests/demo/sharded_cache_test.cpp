// ShardedCache with reference_cpu (label plugin): head shards must give back exactly what one
// writer over all heads gives, so tensor parallelism (issue 9) only adds writers.
#include "sharded_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "kv_generator.h"
#include "kvq/core/registry.h"

namespace kvq::demo {
namespace {

constexpr int64_t kHeads = 4, kDim = 64, kBlocks = 6, kBlockSize = 8;

BackendOptions options() {
  BackendOptions o;
  o.cache.num_blocks = kBlocks;
  o.cache.block_size = kBlockSize;
  o.cache.num_kv_heads = kHeads;
  o.cache.head_size = kDim;
  o.cache.k_scale = 0.5f;
  o.cache.v_scale = 2.0f;
  o.device = Device::cpu();
  return o;
}

TEST(ShardedCache, HeadShardsReadBackWhatOneWriterDoes) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");

  // 11 tokens with one padding row, then a second write into the same pages.
  constexpr int64_t kT = 11;
  KvGenerator gen(5, kHeads, kDim);
  std::vector<float> k(kT * kHeads * kDim), v(k.size());
  gen.rows(0, 0, kT, k.data(), v.data());
  std::vector<uint16_t> kb(k.size()), vb(v.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    kb[i] = bf16_from_float(k[i]);
    vb[i] = bf16_from_float(v[i]);
  }
  const std::vector<int64_t> slots = {40, 41, 3, -1, 17, 18, 19, 20, 0, 47, 8};
  const std::vector<int64_t> read_slots = {40, 41, 3, 17, 18, 19, 20, 0, 47, 8, 5};

  std::vector<std::vector<float>> keys, values;
  for (int64_t shards : {1, 2, 4}) {
    ShardedCache cache(backend, options(), shards, kT, kT);
    EXPECT_EQ(cache.num_shards(), shards);
    EXPECT_EQ(cache.page_bytes(), 2u * kHeads * kBlockSize * (kDim / 2 + kDim / 16));
    EXPECT_GE(cache.write(kb.data(), vb.data(), slots.data(), kT), 0.0);
    std::vector<float> rk(read_slots.size() * kHeads * kDim), rv(rk.size());
    cache.read(read_slots.data(), static_cast<int64_t>(read_slots.size()), rk.data(), rv.data());
    EXPECT_EQ(cache.take_out_of_range_slots(), 0);
    keys.push_back(rk);
    values.push_back(rv);
  }
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(keys[0], keys[2]);
  EXPECT_EQ(values[0], values[1]);
  EXPECT_EQ(values[0], values[2]);
  // And the reads are the rows written (about 10% off), not zeros; slot 5 was never written.
  const std::vector<float>& rk = keys[0];
  double diff = 0, ref = 0;
  for (int64_t t = 0; t < 10; ++t) {
    const int64_t src = t < 3 ? t : t + 1;  // row 3 was padding
    for (int64_t i = 0; i < kHeads * kDim; ++i) {
      const double a = k[src * kHeads * kDim + i], b = rk[t * kHeads * kDim + i];
      diff += (a - b) * (a - b);
      ref += a * a;
    }
  }
  EXPECT_LT(diff / ref, 0.15 * 0.15);
  for (int64_t i = 0; i < kHeads * kDim; ++i) ASSERT_EQ(rk[10 * kHeads * kDim + i], 0.0f);
}

TEST(ShardedCache, RefusesUnevenShards) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  try {
    ShardedCache cache(backend, options(), 3, 1, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "4 KV heads cannot be split into 3 equal shards");
  }
}

}  // namespace
}  // namespace kvq::demo
