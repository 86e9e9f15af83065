// ShardedCache with reference_cpu (label plugin): head shards must give back exactly what one
// writer over all heads gives, and hold exactly its bytes, so tensor parallelism (issue 9) only
// adds writers.
#include "sharded_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "cache_content.h"
#include "kv_generator.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/registry.h"
#include "kvq/io/open_backend.h"
#include "shard_compare.h"

namespace kvq::demo {
namespace {

constexpr int64_t kHeads = 4, kDim = 64, kBlocks = 6, kBlockSize = 8;

BackendOptions options(const char* order = "HND", const char* k_scales = "linear",
                       const char* v_scales = "sm100_swizzled") {
  BackendOptions o;
  o.cache.layout = {order, k_scales, v_scales};
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

// [T, H, D] bf16 bits of sequence `seq` from position 0.
std::vector<uint16_t> rows(int64_t seq, int64_t tokens, bool value) {
  KvGenerator gen(11, kHeads, kDim);
  std::vector<float> k(static_cast<std::size_t>(tokens * kHeads * kDim)), v(k.size());
  gen.rows(seq, 0, tokens, k.data(), v.data());
  std::vector<uint16_t> out(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) out[i] = bf16_from_float(value ? v[i] : k[i]);
  return out;
}

TEST(ShardedCache, ShardBytesAreTheSingleWritersBytes) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  // Two writes: a prefill with padding, then rows overwriting part of it and filling more.
  constexpr int64_t kT1 = 13, kT2 = 9;
  const std::vector<uint16_t> k1 = rows(0, kT1, false), v1 = rows(0, kT1, true);
  const std::vector<uint16_t> k2 = rows(1, kT2, false), v2 = rows(1, kT2, true);
  const std::vector<int64_t> s1 = {8, 9, 10, 11, 12, 13, 14, 15, -1, 40, 41, 42, 43};
  const std::vector<int64_t> s2 = {10, 11, -1, 0, 1, 2, 3, 47, 30};

  for (const auto& [order, ks, vs] : std::vector<std::tuple<const char*, const char*, const char*>>{
           {"HND", "linear", "sm100_swizzled"},
           {"HND", "sm100_swizzled", "sm100_swizzled"},
           {"NHD", "linear", "linear"},
           {"NHD", "linear", "sm100_swizzled"}}) {
    SCOPED_TRACE(std::string(order) + " K " + ks + " V " + vs);
    ShardedCache one(backend, options(order, ks, vs), 1, kT1, kT1);
    one.write(k1.data(), v1.data(), s1.data(), kT1);
    one.write(k2.data(), v2.data(), s2.data(), kT2);
    const std::vector<uint8_t> full = one.cache_bytes(0);
    const PageLayout& full_layout = one.layout(0);
    std::size_t nonzero = 0;
    for (uint8_t b : full) nonzero += b != 0;
    EXPECT_GT(nonzero, full.size() / 4);  // 20 of 48 slots written

    // The logical content of all heads, in head order, hashed as kvq-demo reports it.
    std::vector<uint8_t> content;
    for (int64_t h = 0; h < kHeads; ++h) append_head_content(full_layout, full.data(), h, content);
    const uint64_t full_hash = fnv1a64(content.data(), content.size());

    for (int64_t shards : {2, 4}) {
      SCOPED_TRACE(std::to_string(shards) + " shards");
      ShardedCache cache(backend, options(order, ks, vs), shards, kT1, kT1);
      std::vector<ShardWriteTimes> times;
      cache.write(k1.data(), v1.data(), s1.data(), kT1, &times);
      // Every shard issued before any synchronized, in shard order.
      ASSERT_EQ(times.size(), static_cast<std::size_t>(shards));
      for (std::size_t i = 0; i < times.size(); ++i) {
        EXPECT_LE(times[i].start, times[i].issued);
        EXPECT_LE(times.back().issued, times[i].end);
        if (i > 0) {
          EXPECT_LE(times[i - 1].issued, times[i].start);
          EXPECT_LE(times[i - 1].end, times[i].end);
        }
      }
      cache.write(k2.data(), v2.data(), s2.data(), kT2);

      uint64_t total = 0, hash = kFnv1a64Offset;
      for (int64_t s = 0; s < shards; ++s) {
        EXPECT_EQ(cache.head_begin(s), s * (kHeads / shards));
        EXPECT_EQ(cache.num_heads(s), kHeads / shards);
        EXPECT_EQ(cache.device(s), Device::cpu());
        const std::vector<uint8_t> bytes = cache.cache_bytes(s);
        const PageLayout& layout = cache.layout(s);
        ASSERT_EQ(layout.geometry().num_kv_heads, kHeads / shards);
        total += bytes.size();
        EXPECT_EQ(kvq::test::compare_shard(full_layout, full, layout, bytes, cache.head_begin(s)),
                  "")
            << "shard " << s;
        for (int64_t h = 0; h < cache.num_heads(s); ++h) {
          content.clear();
          append_head_content(layout, bytes.data(), h, content);
          hash = fnv1a64(content.data(), content.size(), hash);
        }
        // HND is head-major in every region: each region of a full page is the shards' regions
        // one after the other.
        if (std::string(order) == "HND") {
          const std::vector<Region> fr = full_layout.regions(), sr = layout.regions();
          ASSERT_EQ(fr.size(), sr.size());
          for (int64_t b = 0; b < kBlocks; ++b) {
            for (std::size_t r = 0; r < fr.size(); ++r) {
              ASSERT_EQ(fr[r].bytes, sr[r].bytes * static_cast<uint64_t>(shards));
              const uint64_t from = static_cast<uint64_t>(b) * full_layout.page_bytes() +
                                    fr[r].offset + static_cast<uint64_t>(s) * sr[r].bytes;
              const uint64_t at = static_cast<uint64_t>(b) * layout.page_bytes() + sr[r].offset;
              ASSERT_TRUE(std::equal(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                     bytes.begin() + static_cast<std::ptrdiff_t>(at + sr[r].bytes),
                                     full.begin() + static_cast<std::ptrdiff_t>(from)))
                  << "block " << b << " region " << fr[r].name << " shard " << s;
            }
          }
        }
      }
      EXPECT_EQ(total, full.size());
      EXPECT_EQ(hash, full_hash);
    }
  }
}

// The device name is each distinct device once: two shards on the one CPU report it as one
// writer over all heads does (it is the JSON's "device"), not "CPU, CPU".
TEST(ShardedCache, DeviceNameListsEachDeviceOnce) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  const ShardedCache one(backend, options(), 1, 1, 1);
  const ShardedCache two(backend, options(), 2, 1, 1);
  EXPECT_FALSE(one.device_name().empty());
  EXPECT_EQ(two.device_name(), one.device_name());
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

TEST(ShardedCache, ADeviceTheBackendRefusesNamesTheShard) {
  Registry registry;
  registry.scan({Registry::installed_plugin_dir()});
  const Backend backend = registry.select("reference_cpu");
  try {
    ShardedCache cache(backend, options(), 2, 1, 1, {Device::cpu(), Device::cuda(1)});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("shard 1 of 2 (KV heads 2..3, cuda:1): backend 'reference_cpu'", 0), 0u) << m;
    EXPECT_NE(m.find("device cuda:1 is not supported"), std::string::npos) << m;
  }
}

// open_backend (apps/common, shared by kvq and kvq-demo) hands the backend what the config says:
// its threads and device, not the backend's defaults.
TEST(OpenBackend, CarriesTheConfigsThreadsDeviceAndCache) {
  const Config cfg = parse_config(
      "backend: reference_cpu\ndevice: cpu\nthreads: 3\n"
      "cache: {format: nvfp4, num_blocks: 6, block_size: 8, num_kv_heads: 4, head_size: 64}\n");
  const OpenedBackend opened = open_backend(cfg);
  EXPECT_EQ(opened.backend.info().name, "reference_cpu");
  EXPECT_EQ(opened.options.threads, 3);
  EXPECT_EQ(opened.options.device, Device::cpu());
  EXPECT_EQ(opened.options.cache.num_blocks, 6);
  EXPECT_EQ(opened.options.cache.head_size, 64);
}

// A Config changed in code after loading: a device word that is not one is an error at the key,
// not a silent fallback to the backend's default device.
TEST(OpenBackend, RefusesADeviceWordItCannotParse) {
  Config cfg = parse_config(
      "backend: reference_cpu\ndevice: cpu\n"
      "cache: {format: nvfp4, num_blocks: 6, block_size: 8, num_kv_heads: 4, head_size: 64}\n");
  cfg.device = "cuda";
  try {
    (void)open_backend(cfg);
    FAIL() << "open_backend accepted device 'cuda'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("device: expected auto, cpu or cuda:N, found 'cuda'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvq::demo
