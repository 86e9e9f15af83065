// `kvq write` then `kvq read` end to end with the reference_cpu plugin, exactly as the
// command-line contract of docs/architecture.md says: the files' tensor names, dtypes and
// metadata, --cache, and exit statuses 0 / 1 / 2 with one stderr line naming the file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kvq/core/scale_rule.h"
#include "kvq/core/status.h"
#include "kvq/io/file_io.h"
#include "kvq/io/safetensors.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "kvq_cli_fixture.h"

namespace kvq {
namespace {
namespace fs = std::filesystem;
using test::slurp;

// num_blocks 24 x block_size 16, H 2, D 128: page = 2 * (2*16*64 + 2*16*8) = 4608 bytes.
constexpr int64_t kBlocks = 24, kBlockSize = 16, kHeads = 2, kHeadSize = 128, kPage = 4608;
constexpr int64_t kTokens = 300;

const char* kConfig = R"(backend: reference_cpu
device: cpu
threads: 2
cache:
  format: nvfp4
  num_blocks: 24
  block_size: 16
  num_kv_heads: 2
  head_size: 128
  layout: { order: HND, k_scales: linear, v_scales: sm100_swizzled }
  k_scale: 1.0
  v_scale: 1.0
log: { level: warn }
)";

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; finite |f| < 65520 (the Gaussian rows here are far inside).
uint16_t to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const float a = std::fabs(f);
  // Zero or subnormal: a multiple of 2^-24 (1024 of them round up to the least normal).
  if (a < 0x1p-14f) {
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 0x1p24f)));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // Biased exponent e - 1 + 15; a mantissa that rounds up to 1024 carries into the exponent.
  const uint32_t bits = (static_cast<uint32_t>(e + 14) << 10) +
                        static_cast<uint32_t>(std::nearbyint((2.0f * m - 1.0f) * 1024.0f));
  return static_cast<uint16_t>(sign | bits);
}

double rel_l2(const std::vector<float>& a, const float* b, const std::vector<int64_t>& slots,
              int64_t row) {
  double num = 0, den = 0;
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    for (int64_t e = 0; e < row; ++e) {
      const double x = a[t * row + e], d = x - b[t * row + e];
      num += d * d;
      den += x * x;
    }
  }
  return std::sqrt(num / den);
}

// The input file: Gaussian bf16 K (sigma 3) and V (sigma 0.5), shuffled slots, every 10th padding.
struct Input {
  std::vector<uint16_t> key, value;
  std::vector<float> key_f, value_f;
  std::vector<int64_t> slots;
  Input() {
    std::mt19937 rng(9);
    std::normal_distribution<float> gauss;
    for (int64_t i = 0; i < kTokens * kHeads * kHeadSize; ++i) {
      key.push_back(to_bf16(3.0f * gauss(rng)));
      value.push_back(to_bf16(0.5f * gauss(rng)));
      key_f.push_back(from_bf16(key.back()));
      value_f.push_back(from_bf16(value.back()));
    }
    std::vector<int64_t> all(kBlocks * kBlockSize);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kTokens);
    for (int64_t i = 0; i < kTokens; i += 10) slots[i] = -1;
  }
  std::vector<NamedTensor> tensors(int64_t begin = 0, int64_t end = kTokens) {
    const int64_t row = kHeads * kHeadSize, n = end - begin;
    return {{"key", make_view(key.data() + begin * row, DType::bf16, {n, kHeads, kHeadSize})},
            {"value", make_view(value.data() + begin * row, DType::bf16, {n, kHeads, kHeadSize})},
            {"slot_mapping", make_view(slots.data() + begin, DType::i64, {n})}};
  }
  // The whole input with key and value as `rows` (BF16, F16 or F32) and slot_mapping as `slot`
  // (I64 or I32). F32 and I32 hold the same values exactly; F16 too, but for the few elements
  // below F16's normal range (2^-14), which it rounds.
  std::vector<NamedTensor> tensors_as(DType rows, DType slot) {
    std::vector<NamedTensor> t = tensors();
    if (rows == DType::f32) {
      t[0].view = make_view(key_f.data(), DType::f32, {kTokens, kHeads, kHeadSize});
      t[1].view = make_view(value_f.data(), DType::f32, {kTokens, kHeads, kHeadSize});
    } else if (rows == DType::f16) {
      key_h.clear();
      value_h.clear();
      for (float f : key_f) key_h.push_back(to_f16(f));
      for (float f : value_f) value_h.push_back(to_f16(f));
      t[0].view = make_view(key_h.data(), DType::f16, {kTokens, kHeads, kHeadSize});
      t[1].view = make_view(value_h.data(), DType::f16, {kTokens, kHeads, kHeadSize});
    }
    if (slot == DType::i32) {
      slots_i32.assign(slots.size(), 0);
      for (size_t i = 0; i < slots.size(); ++i) slots_i32[i] = static_cast<int32_t>(slots[i]);
      t[2].view = make_view(slots_i32.data(), DType::i32, {kTokens});
    }
    return t;
  }
  std::vector<uint16_t> key_h, value_h;  // F16, made by tensors_as
  std::vector<int32_t> slots_i32;        // made by tensors_as
};

class WriteReadCli : public test::KvqCliTest {
 protected:
  void SetUp() override {
    KvqCliTest::SetUp();
    if (HasFatalFailure()) return;
    config_ = dir_ / "cfg.yaml";
    std::ofstream(config_) << kConfig;
    save_safetensors(path("in.safetensors"), input_.tensors());
  }

  test::CliResult write(const std::string& extra, const std::string& out = "cache.safetensors",
                        const std::string& in = "in.safetensors") {
    return write_with(config_.string(), extra, out, in);
  }
  test::CliResult write_with(const std::string& config, const std::string& extra,
                             const std::string& out = "cache.safetensors",
                             const std::string& in = "in.safetensors") {
    return kvq("write " + config + " --input " + path(in) + " --output " + path(out) + " " + extra);
  }

  // kConfig with other k_scale and v_scale (different from each other, so that a mix-up of the
  // sides shows), written to `name`; returns its path.
  std::string scaled_config(float k_scale = 2.0f, float v_scale = 0.25f,
                            const std::string& name = "scaled.yaml") const {
    std::string text = kConfig;
    text.replace(text.find("k_scale: 1.0"), 12, fmt::format("k_scale: {}", k_scale));
    text.replace(text.find("v_scale: 1.0"), 12, fmt::format("v_scale: {}", v_scale));
    std::ofstream(path(name)) << text;
    return path(name);
  }

  // The cache the reference writer makes, in-process, from the whole input (or `t`: key, value,
  // slot_mapping) with these scales.
  std::vector<uint8_t> reference_bytes(float k_scale, float v_scale) {
    return reference_bytes(k_scale, v_scale, input_.tensors());
  }
  std::vector<uint8_t> reference_bytes(float k_scale, float v_scale,
                                       const std::vector<NamedTensor>& t) {
    BackendOptions o;
    o.cache.num_blocks = kBlocks;
    o.cache.num_kv_heads = kHeads;
    o.cache.head_size = kHeadSize;
    reference_cpu::ReferenceWriter writer(o);
    std::vector<uint8_t> bytes(kBlocks * kPage, 0);
    WriteArgs a;
    a.key = t[0].view;
    a.value = t[1].view;
    a.slot_mapping = t[2].view;
    a.cache = make_view(bytes.data(), DType::u8, {kBlocks, kPage});
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    EXPECT_TRUE(writer.write(a).is_ok());
    return bytes;
  }
  test::CliResult read(const std::string& cache = "cache.safetensors",
                       const std::string& slots = "in.safetensors", const std::string& config = "",
                       const std::string& out = "out.safetensors") {
    return kvq("read " + (config.empty() ? config_.string() : config) + " --cache " + path(cache) +
               " --slot-mapping " + path(slots) + " --output " + path(out));
  }

  // Exit status `status` and one stderr line starting with "kvq: " + `prefix`.
  static void expect_failure(const test::CliResult& r, int status, const std::string& prefix) {
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_EQ(r.err.rfind("kvq: " + prefix, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }

  fs::path config_;
  Input input_;
};

TEST_F(WriteReadCli, WriteThenReadReproducesTheRoundTripError) {
  const test::CliResult w = write("");
  ASSERT_EQ(w.status, 0) << w.err;
  EXPECT_EQ(w.err, "");
  EXPECT_NE(w.out.find("wrote 270 tokens (30 padding) with reference_cpu"), std::string::npos)
      << w.out;

  const auto cache = SafetensorsFile::load(path("cache.safetensors"));
  ASSERT_EQ(cache.tensors().size(), 1u);
  const SafetensorsTensor& kv = cache.at("kv_cache");
  EXPECT_EQ(kv.dtype, DType::u8);
  EXPECT_EQ(kv.shape, (std::vector<int64_t>{kBlocks, kPage}));
  const std::map<std::string, std::string> expected_metadata = {
      {"format", "nvfp4"},    {"order", "HND"},
      {"k_scales", "linear"}, {"v_scales", "sm100_swizzled"},
      {"num_blocks", "24"},   {"block_size", "16"},
      {"num_kv_heads", "2"},  {"head_size", "128"},
      {"group_size", "16"},   {"page_bytes", "4608"},
      {"k_scale", "1"},       {"v_scale", "1"}};
  EXPECT_EQ(cache.metadata(), expected_metadata);

  // The bytes are the reference writer's, called in-process on the same input.
  const std::vector<uint8_t> bytes = reference_bytes(1.0f, 1.0f);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), kv.bytes.begin()));

  const test::CliResult r = read();
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = SafetensorsFile::load(path("out.safetensors"));
  const SafetensorsTensor& key = out.at("key");
  const SafetensorsTensor& value = out.at("value");
  EXPECT_EQ(key.dtype, DType::f32);
  EXPECT_EQ(key.shape, (std::vector<int64_t>{kTokens, kHeads, kHeadSize}));
  EXPECT_EQ(value.shape, key.shape);
  const auto* k = reinterpret_cast<const float*>(key.bytes.data());
  const auto* v = reinterpret_cast<const float*>(value.bytes.data());
  const int64_t row = kHeads * kHeadSize;
  const double ek = rel_l2(input_.key_f, k, input_.slots, row);
  const double ev = rel_l2(input_.value_f, v, input_.slots, row);
  EXPECT_GE(ek, 0.07);
  EXPECT_LE(ek, 0.12);
  EXPECT_GE(ev, 0.07);
  EXPECT_LE(ev, 0.12);
  for (int64_t e = 0; e < row; ++e) ASSERT_EQ(k[e], 0.0f) << "padding token 0 reads as zeros";
}

// Every input dtype of the contract: key and value BF16, F16 or F32, slot_mapping I64 or I32. Each
// cache is the reference writer's, called in-process on the same tensors, and the very bytes of
// the BF16 + I64 write: F32 and I32 hold its values exactly, and F16 rounds only the few elements
// below 2^-14, far below the least nonzero NVFP4 value of any group here, so they quantize to 0.
TEST_F(WriteReadCli, WriteTakesF16AndF32RowsAndAnI32SlotMapping) {
  ASSERT_EQ(write("", "bf16_i64.safetensors").status, 0);
  const auto bf16_i64 = SafetensorsFile::load(path("bf16_i64.safetensors"));
  const auto base = bf16_i64.at("kv_cache").bytes;
  for (const DType rows : {DType::bf16, DType::f16, DType::f32}) {
    for (const DType slot : {DType::i64, DType::i32}) {
      const std::string name =
          fmt::format("{}_{}", safetensors_dtype_name(rows), safetensors_dtype_name(slot));
      SCOPED_TRACE(fmt::format("key, value {}, slot_mapping {}", safetensors_dtype_name(rows),
                               safetensors_dtype_name(slot)));
      const std::vector<NamedTensor> t = input_.tensors_as(rows, slot);
      ASSERT_EQ(t[0].view.dtype, rows);
      ASSERT_EQ(t[2].view.dtype, slot);
      save_safetensors(path(name + "_in.safetensors"), t);
      const test::CliResult w = write("", name + ".safetensors", name + "_in.safetensors");
      EXPECT_EQ(w.status, 0) << w.err;
      if (w.status != 0) continue;  // the other dtypes still say what they give
      EXPECT_NE(w.out.find("wrote 270 tokens (30 padding) with reference_cpu"), std::string::npos)
          << w.out;
      const auto cache = SafetensorsFile::load(path(name + ".safetensors"));
      const auto got = cache.at("kv_cache").bytes;
      const std::vector<uint8_t> want = reference_bytes(1.0f, 1.0f, t);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
          << "the cache is not the reference writer's on the same tensors";
      EXPECT_TRUE(std::equal(base.begin(), base.end(), got.begin()))
          << "the same values in another dtype gave other bytes than BF16 + I64";
    }
  }
}

TEST_F(WriteReadCli, ScalesFromTheInputAreUsedAndRecorded) {
  // amax/448-style scales in the input file override the config's 1.0 and travel in the cache.
  float k_scale = 0.03125f, v_scale = 0.0078125f;
  auto t = input_.tensors();
  t.push_back({"k_scale", make_view(&k_scale, DType::f32, {})});
  t.push_back({"v_scale", make_view(&v_scale, DType::f32, {1})});
  save_safetensors(path("scaled.safetensors"), t);
  ASSERT_EQ(write("", "cache.safetensors", "scaled.safetensors").status, 0);
  const auto cache = SafetensorsFile::load(path("cache.safetensors"));
  EXPECT_EQ(cache.metadata().at("k_scale"), "0.03125");
  EXPECT_EQ(cache.metadata().at("v_scale"), "0.0078125");
  // A slot-mapping file without scales: the ones the cache records are used.
  save_safetensors(path("slots.safetensors"), {input_.tensors()[2]});
  const test::CliResult r = read("cache.safetensors", "slots.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = SafetensorsFile::load(path("out.safetensors"));
  const auto* k = reinterpret_cast<const float*>(out.at("key").bytes.data());
  EXPECT_LE(rel_l2(input_.key_f, k, input_.slots, kHeads * kHeadSize), 0.12);
  // Extending that cache with other scales is refused, naming where the other scale came from:
  // in.safetensors has none, so the 1 is the config's; rescaled.safetensors has its own.
  expect_failure(write("--cache " + path("cache.safetensors"), "more.safetensors"), 2,
                 config_.string() + ": cache.k_scale = 1 differs from the k_scale 0.03125 that " +
                     path("cache.safetensors") + " was written with");
  k_scale = 0.5f;
  save_safetensors(path("rescaled.safetensors"), t);
  expect_failure(
      write("--cache " + path("cache.safetensors"), "more.safetensors", "rescaled.safetensors"), 2,
      path("rescaled.safetensors") + ": tensor k_scale = 0.5 differs from the k_scale 0.03125");
}

// The config's scales, one per side, when the input file has no scale tensors: K and V each
// quantized with its own (the bytes are the reference writer's with k_scale 2, v_scale 0.25)
// and each recorded under its own name.
TEST_F(WriteReadCli, ConfigScalesAreUsedPerSideAndRecorded) {
  const test::CliResult w = write_with(scaled_config(), "");
  ASSERT_EQ(w.status, 0) << w.err;
  const auto cache = SafetensorsFile::load(path("cache.safetensors"));
  EXPECT_EQ(cache.metadata().at("k_scale"), "2");
  EXPECT_EQ(cache.metadata().at("v_scale"), "0.25");
  const std::vector<uint8_t> want = reference_bytes(2.0f, 0.25f);
  const SafetensorsTensor& kv = cache.at("kv_cache");
  ASSERT_EQ(kv.bytes.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), kv.bytes.begin()))
      << "the cache is not the reference writer's with k_scale 2, v_scale 0.25";
}

// A read whose config says 1 and 1 dequantizes with the scales the cache records (2 for K, 0.25
// for V), each side with its own: with any other the rows come back 2x, 4x or 8x off.
TEST_F(WriteReadCli, ReadUsesEachScaleTheCacheRecords) {
  ASSERT_EQ(write_with(scaled_config(), "").status, 0);
  save_safetensors(path("slots.safetensors"), {input_.tensors()[2]});
  const test::CliResult r = read("cache.safetensors", "slots.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("(k_scale 2, v_scale 0.25)"), std::string::npos) << r.out;
  const auto out = SafetensorsFile::load(path("out.safetensors"));
  const auto* k = reinterpret_cast<const float*>(out.at("key").bytes.data());
  const auto* v = reinterpret_cast<const float*>(out.at("value").bytes.data());
  EXPECT_LE(rel_l2(input_.key_f, k, input_.slots, kHeads * kHeadSize), 0.12);
  EXPECT_LE(rel_l2(input_.value_f, v, input_.slots, kHeads * kHeadSize), 0.12);
}

// k_scale / v_scale tensors in the --slot-mapping file come before the cache's: twice the
// recorded k_scale reads K exactly twice as large, four times the recorded v_scale V four times.
TEST_F(WriteReadCli, ScaleTensorsOfTheSlotMappingFileOverrideTheCaches) {
  ASSERT_EQ(write_with(scaled_config(), "").status, 0);
  save_safetensors(path("slots.safetensors"), {input_.tensors()[2]});
  ASSERT_EQ(read("cache.safetensors", "slots.safetensors", "", "recorded.safetensors").status, 0);
  float k_scale = 4.0f, v_scale = 1.0f;
  save_safetensors(path("scaled_slots.safetensors"),
                   {input_.tensors()[2],
                    {"k_scale", make_view(&k_scale, DType::f32, {})},
                    {"v_scale", make_view(&v_scale, DType::f32, {1})}});
  const test::CliResult r =
      read("cache.safetensors", "scaled_slots.safetensors", "", "override.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("(k_scale 4, v_scale 1)"), std::string::npos) << r.out;
  const auto recorded = SafetensorsFile::load(path("recorded.safetensors"));
  const auto overridden = SafetensorsFile::load(path("override.safetensors"));
  const int64_t n = kTokens * kHeads * kHeadSize;
  const auto* k1 = reinterpret_cast<const float*>(recorded.at("key").bytes.data());
  const auto* v1 = reinterpret_cast<const float*>(recorded.at("value").bytes.data());
  const auto* k2 = reinterpret_cast<const float*>(overridden.at("key").bytes.data());
  const auto* v2 = reinterpret_cast<const float*>(overridden.at("value").bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(k2[i], 2.0f * k1[i]) << "key element " << i;
    ASSERT_EQ(v2[i], 4.0f * v1[i]) << "value element " << i;
  }
}

// The v_scale side of "a cache holds one scale per side": the same k_scale but another v_scale
// must not extend it.
TEST_F(WriteReadCli, ExtendingWithAnotherVScaleIsRefused) {
  ASSERT_EQ(write_with(scaled_config(), "").status, 0);
  const std::string other = scaled_config(2.0f, 1.0f, "v_is_one.yaml");
  expect_failure(write_with(other, "--cache " + path("cache.safetensors"), "more.safetensors"), 2,
                 other + ": cache.v_scale = 1 differs from the v_scale 0.25 that " +
                     path("cache.safetensors") + " was written with");
  EXPECT_FALSE(fs::exists(path("more.safetensors")));
}

TEST_F(WriteReadCli, CacheOptionExtendsAnExistingCache) {
  save_safetensors(path("first.safetensors"), input_.tensors(0, 120));
  save_safetensors(path("second.safetensors"), input_.tensors(120, kTokens));
  ASSERT_EQ(write("", "whole.safetensors").status, 0);
  ASSERT_EQ(write("", "half.safetensors", "first.safetensors").status, 0);
  const test::CliResult w =
      write("--cache " + path("half.safetensors") + " --backend reference_cpu", "both.safetensors",
            "second.safetensors");
  ASSERT_EQ(w.status, 0) << w.err;
  const auto whole = SafetensorsFile::load(path("whole.safetensors"));
  const auto both = SafetensorsFile::load(path("both.safetensors"));
  EXPECT_TRUE(std::equal(whole.at("kv_cache").bytes.begin(), whole.at("kv_cache").bytes.end(),
                         both.at("kv_cache").bytes.begin()));
}

TEST_F(WriteReadCli, BadInputsExitTwoNamingTheFile) {
  const std::string in = path("in.safetensors");
  // A slot past the cache: the writer's message, prefixed with the input file.
  const int64_t original = input_.slots[3];
  input_.slots[3] = kBlocks * kBlockSize;
  save_safetensors(path("bad_slot.safetensors"), input_.tensors());
  expect_failure(write("", "c.safetensors", "bad_slot.safetensors"), 2,
                 path("bad_slot.safetensors") +
                     ": slot_mapping[3] = 384: expected < 384 (num_blocks 24 x block_size 16");
  EXPECT_FALSE(fs::exists(path("c.safetensors"))) << "a refused write left an output file";
  input_.slots[3] = original;

  // A repeated slot: refused by kvq write itself, before any backend (a GPU writer could not see
  // it), so the message names the tensor as the other input checks do.
  const int64_t eighth = input_.slots[8];
  input_.slots[8] = input_.slots[4];
  save_safetensors(path("twice.safetensors"), input_.tensors());
  expect_failure(write("", "c.safetensors", "twice.safetensors"), 2,
                 fmt::format("{}: tensor 'slot_mapping': slot_mapping[8] = {}, the same slot as "
                             "slot_mapping[4]: expected each slot at most once",
                             path("twice.safetensors"), input_.slots[4]));
  EXPECT_FALSE(fs::exists(path("c.safetensors")));
  input_.slots[8] = eighth;

  auto t = input_.tensors();
  save_safetensors(path("no_value.safetensors"), {t[0], t[2]});
  expect_failure(write("", "c.safetensors", "no_value.safetensors"), 2,
                 path("no_value.safetensors") + ": no tensor 'value' (has: key, slot_mapping)");

  std::vector<int32_t> wrong(kTokens * kHeads * kHeadSize);
  save_safetensors(
      path("i32_key.safetensors"),
      {{"key", make_view(wrong.data(), DType::i32, {kTokens, kHeads, kHeadSize})}, t[1], t[2]});
  expect_failure(
      write("", "c.safetensors", "i32_key.safetensors"), 2,
      path("i32_key.safetensors") + ": tensor 'key': dtype I32: expected BF16, F16 or F32");

  save_safetensors(path("short_slots.safetensors"),
                   {t[0], t[1], {"slot_mapping", make_view(input_.slots.data(), DType::i64, {7})}});
  expect_failure(write("", "c.safetensors", "short_slots.safetensors"), 2,
                 path("short_slots.safetensors") +
                     ": tensor 'slot_mapping': shape [7]: expected [300] (num_tokens of key)");

  save_safetensors(path("extra.safetensors"), {t[0], t[1], t[2], {"k_scales", t[2].view}});
  expect_failure(write("", "c.safetensors", "extra.safetensors"), 2,
                 path("extra.safetensors") + ": tensor 'k_scales' is not an input of kvq write");

  float zero = 0.0f;
  save_safetensors(path("zero_scale.safetensors"),
                   {t[0], t[1], t[2], {"v_scale", make_view(&zero, DType::f32, {})}});
  expect_failure(write("", "c.safetensors", "zero_scale.safetensors"), 2,
                 path("zero_scale.safetensors") + ": v_scale = 0: expected a finite value > 0");

  // A truncated file, a missing file, a missing flag.
  const std::string bytes = slurp(in);
  std::ofstream(path("truncated.safetensors"), std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 1));
  expect_failure(write("", "c.safetensors", "truncated.safetensors"), 2,
                 path("truncated.safetensors") + ": ");
  expect_failure(write("", "c.safetensors", "nope.safetensors"), 2,
                 path("nope.safetensors") + ": no such file");
  const test::CliResult usage = kvq("write " + config_.string() + " --input " + in);
  EXPECT_EQ(usage.status, 2) << usage.err;
}

TEST_F(WriteReadCli, ReadRefusesACacheOfAnotherLayout) {
  ASSERT_EQ(write("").status, 0);
  std::string other = kConfig;
  other.replace(other.find("num_blocks: 24"), 14, "num_blocks: 32");
  std::ofstream(path("other.yaml")) << other;
  expect_failure(read("cache.safetensors", "in.safetensors", path("other.yaml")), 2,
                 path("cache.safetensors") + ": the cache's layout differs from " +
                     path("other.yaml") + ": num_blocks is 24 in the cache, 32 in the config");
  other = kConfig;
  other.replace(other.find("v_scales: sm100_swizzled"), 24, "v_scales: linear");
  std::ofstream(path("linear.yaml")) << other;
  expect_failure(read("cache.safetensors", "in.safetensors", path("linear.yaml")), 2,
                 path("cache.safetensors") + ": the cache's layout differs from " +
                     path("linear.yaml") +
                     ": v_scales is sm100_swizzled in the cache, linear in "
                     "the config");
  // A cache without kvq's metadata, e.g. from another tool.
  std::vector<uint8_t> raw(kBlocks * kPage);
  save_safetensors(path("bare.safetensors"),
                   {{"kv_cache", make_view(raw.data(), DType::u8, {kBlocks, kPage})}});
  expect_failure(read("bare.safetensors"), 2,
                 path("bare.safetensors") + ": __metadata__ has no 'block_size'");
  // Slots out of range on read.
  input_.slots[5] = 1000;
  save_safetensors(path("far.safetensors"), {input_.tensors()[2]});
  expect_failure(read("cache.safetensors", "far.safetensors"), 2,
                 path("far.safetensors") + ": slot_mapping[5] = 1000: expected < 384");
}

// Text from an input file reaches stderr escaped, so a message stays one line and the terminal
// takes no escape sequence from it: a tensor name with a newline and an ANSI colour in it.
TEST_F(WriteReadCli, WriteEscapesAForeignTensorNameInItsOneLineError) {
  auto t = input_.tensors();
  t.push_back({"x\n\x1b[31mkvq: forged", t[2].view});
  save_safetensors(path("named.safetensors"), t);
  const test::CliResult r = write("", "c.safetensors", "named.safetensors");
  expect_failure(r, 2,
                 path("named.safetensors") +
                     ": tensor 'x\\n\\x1b[31mkvq: forged' is not an input of kvq write");
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("c.safetensors")));
}

// And so does a cache file's __metadata__: a layout field and a recorded scale.
TEST_F(WriteReadCli, ReadEscapesCacheMetadataInItsOneLineError) {
  ASSERT_EQ(write("").status, 0);
  const auto good = SafetensorsFile::load(path("cache.safetensors"));
  std::vector<uint8_t> bytes(good.at("kv_cache").bytes.begin(), good.at("kv_cache").bytes.end());
  const auto with = [&](const char* key, const char* value, const std::string& name) {
    auto m = good.metadata();
    m[key] = value;
    save_safetensors(path(name),
                     {{"kv_cache", make_view(bytes.data(), DType::u8, {kBlocks, kPage})}}, m);
  };
  with("order", "HND\n\x1b[2Jkvq: forged", "order.safetensors");
  test::CliResult r = read("order.safetensors");
  expect_failure(r, 2,
                 path("order.safetensors") + ": the cache's layout differs from " +
                     config_.string() +
                     ": order is HND\\n\\x1b[2Jkvq: forged in the cache, HND in the config");
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  with("k_scale", "1\r\x1b[1Akvq: forged", "scale.safetensors");
  r = read("scale.safetensors");
  expect_failure(r, 2,
                 path("scale.safetensors") +
                     ": __metadata__ k_scale = '1\\r\\x1b[1Akvq: forged': " + kScaleRule);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

// A cache file's recorded k_scale is read with the config's number grammar (parse_number), not
// strtof's: hexadecimal, a '+' and spaces are refused there as in a config, naming the file.
TEST_F(WriteReadCli, ReadTakesRecordedScalesInTheConfigsGrammar) {
  ASSERT_EQ(write("").status, 0);
  const auto good = SafetensorsFile::load(path("cache.safetensors"));
  std::vector<uint8_t> bytes(good.at("kv_cache").bytes.begin(), good.at("kv_cache").bytes.end());
  const auto with_scale = [&](const std::string& value) {
    auto m = good.metadata();
    m["k_scale"] = value;
    save_safetensors(path("scale.safetensors"),
                     {{"kv_cache", make_view(bytes.data(), DType::u8, {kBlocks, kPage})}}, m);
    return read("scale.safetensors");
  };
  for (const std::string bad : {"0x1p3", "+2", " 1.0", "1.0 ", "Infinity", "8f"}) {
    SCOPED_TRACE(bad);
    expect_failure(
        with_scale(bad), 2,
        path("scale.safetensors") + ": __metadata__ k_scale = '" + bad + "': " + kScaleRule);
  }
  const test::CliResult r = with_scale("8");
  EXPECT_EQ(r.status, 0) << r.err;
}

// Cache files made by hand with kvq's metadata but something wrong elsewhere: each refused with
// exit 2 naming the file, before any backend reads a byte of it.
TEST_F(WriteReadCli, ReadRefusesHandMadeCacheFilesNamingTheFault) {
  ASSERT_EQ(write("").status, 0);
  const auto good = SafetensorsFile::load(path("cache.safetensors"));
  const std::map<std::string, std::string> metadata = good.metadata();
  std::vector<uint8_t> bytes(good.at("kv_cache").bytes.begin(), good.at("kv_cache").bytes.end());

  // The right bytes in one flat row: not [num_blocks, page_bytes].
  save_safetensors(path("flat.safetensors"),
                   {{"kv_cache", make_view(bytes.data(), DType::u8, {kBlocks * kPage})}}, metadata);
  expect_failure(read("flat.safetensors"), 2,
                 path("flat.safetensors") +
                     ": tensor 'kv_cache': U8 [110592]: expected U8 [24, 4608] (num_blocks x "
                     "page_bytes)");

  // Recorded scales that no write can have used, by the writer's own rule: not > 0, or so small
  // that the reciprocal overflows. The cache file is named, not the slot-mapping file the read
  // also takes.
  const auto with = [&](const char* key, const char* value, const std::string& name) {
    auto m = metadata;
    m[key] = value;
    save_safetensors(path(name),
                     {{"kv_cache", make_view(bytes.data(), DType::u8, {kBlocks, kPage})}}, m);
  };
  const std::string rule = kScaleRule;
  with("v_scale", "-0.5", "negative_v.safetensors");
  expect_failure(read("negative_v.safetensors"), 2,
                 path("negative_v.safetensors") + ": __metadata__ v_scale = '-0.5': " + rule);
  with("k_scale", "0", "zero_k.safetensors");
  expect_failure(read("zero_k.safetensors"), 2,
                 path("zero_k.safetensors") + ": __metadata__ k_scale = '0': " + rule);
  with("k_scale", "1e-40", "subnormal_k.safetensors");
  expect_failure(read("subnormal_k.safetensors"), 2,
                 path("subnormal_k.safetensors") + ": __metadata__ k_scale = '1e-40': " + rule);
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

// A scale tensor must be a scalar: [] or [1]. [1, 1] holds one value too, but is refused, in kvq
// write's input and in kvq read's slot-mapping file alike.
TEST_F(WriteReadCli, ScaleTensorsOfShapeOneByOneAreRefused) {
  float one = 1.0f;
  auto t = input_.tensors();
  t.push_back({"k_scale", make_view(&one, DType::f32, {1, 1})});
  save_safetensors(path("square_scale.safetensors"), t);
  expect_failure(write("", "c.safetensors", "square_scale.safetensors"), 2,
                 path("square_scale.safetensors") +
                     ": tensor 'k_scale': F32 [1, 1]: expected F32 with shape [] or [1]");
  EXPECT_FALSE(fs::exists(path("c.safetensors")));

  ASSERT_EQ(write("").status, 0);
  save_safetensors(path("square_slots.safetensors"),
                   {t[2], {"v_scale", make_view(&one, DType::f32, {1, 1})}});
  expect_failure(read("cache.safetensors", "square_slots.safetensors"), 2,
                 path("square_slots.safetensors") +
                     ": tensor 'v_scale': F32 [1, 1]: expected F32 with shape [] or [1]");
}

// kvq read's slot_mapping is one row of slots: a [2, 2] of valid slots is refused, not read as 2
// tokens or 4.
TEST_F(WriteReadCli, ReadRefusesATwoDimensionalSlotMapping) {
  ASSERT_EQ(write("").status, 0);
  std::vector<int64_t> slots = {0, 1, 2, 3};
  save_safetensors(path("square.safetensors"),
                   {{"slot_mapping", make_view(slots.data(), DType::i64, {2, 2})}});
  expect_failure(read("cache.safetensors", "square.safetensors"), 2,
                 path("square.safetensors") +
                     ": tensor 'slot_mapping': I64 [2, 2]: expected I64 or I32 [num_tokens]");
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

// Padding is a negative slot; slot 0 is a slot like any other and its token is counted written.
TEST_F(WriteReadCli, SlotZeroIsWrittenNotPadding) {
  std::vector<int64_t> slots = {0, -1, 17, 1};
  auto t = input_.tensors(0, 4);
  t[2].view = make_view(slots.data(), DType::i64, {4});
  save_safetensors(path("slot0.safetensors"), t);
  const test::CliResult w = write("", "c.safetensors", "slot0.safetensors");
  ASSERT_EQ(w.status, 0) << w.err;
  EXPECT_EQ(
      w.out.rfind(path("slot0.safetensors") + ": wrote 3 tokens (1 padding) with reference_cpu", 0),
      0u)
      << w.out;
}

// A KVQ_LOG_LEVEL that is not a level is said, not silently dropped; the run goes on.
TEST_F(WriteReadCli, UnknownLogLevelInTheEnvironmentIsReported) {
  const test::CliResult r = kvq("write " + config_.string() + " --input " + path("in.safetensors") +
                                    " --output " + path("c.safetensors"),
                                "KVQ_LOG_LEVEL=verbose ");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("KVQ_LOG_LEVEL=verbose: not a log level (expected trace, debug, info, "
                       "warn, error or off); ignored"),
            std::string::npos)
      << r.err;
  const test::CliResult check = kvq("check " + config_.string(), "KVQ_LOG_LEVEL=verbose ");
  EXPECT_EQ(check.status, 0) << check.err;
  EXPECT_NE(check.err.find("KVQ_LOG_LEVEL=verbose: not a log level"), std::string::npos)
      << check.err;
}

TEST_F(WriteReadCli, UnwritableOutputIsAUsageErrorBeforeAnyWork) {
  expect_failure(write("", "no/such/dir/cache.safetensors"), 2,
                 "--output " + path("no/such/dir/cache.safetensors") + ": no such folder " +
                     path("no/such/dir"));
  expect_failure(
      kvq("write " + config_.string() + " --input " + path("in.safetensors") + " --output ''"), 2,
      "--output: expected a value, found ''");
  fs::create_directories(dir_ / "a_folder");
  expect_failure(read("cache.safetensors", "in.safetensors", "", "a_folder"), 2,
                 "--output " + path("a_folder") + ": is a folder: expected a file path");
}

// An output that names one of the command's inputs would replace what the command reads: refused
// before any work, the input untouched. Writing over the --cache a write starts from is the
// in-place update and stays allowed.
TEST_F(WriteReadCli, AnOutputThatIsAnInputIsRefused) {
  const std::string in_before = slurp(dir_ / "in.safetensors");
  expect_failure(write("", "in.safetensors"), 2,
                 "--output " + path("in.safetensors") + ": is the --input file");
  EXPECT_EQ(slurp(dir_ / "in.safetensors"), in_before);
  ASSERT_EQ(write("").status, 0);
  const std::string cache_before = slurp(dir_ / "cache.safetensors");
  expect_failure(read("cache.safetensors", "in.safetensors", "", "cache.safetensors"), 2,
                 "--output " + path("cache.safetensors") + ": is the --cache file");
  expect_failure(read("cache.safetensors", "in.safetensors", "", "in.safetensors"), 2,
                 "--output " + path("in.safetensors") + ": is the --slot-mapping file");
  EXPECT_EQ(slurp(dir_ / "cache.safetensors"), cache_before);
  EXPECT_EQ(slurp(dir_ / "in.safetensors"), in_before);
  const test::CliResult in_place =
      write("--cache " + path("cache.safetensors"), "cache.safetensors");
  EXPECT_EQ(in_place.status, 0) << in_place.err;
  // OUT's bytes go first to a temporary made for the write (OUT.tmp.XXXXXX, a new file): an input
  // named OUT.tmp is read, not truncated.
  fs::copy_file(dir_ / "in.safetensors", dir_ / "x.safetensors.tmp");
  const test::CliResult through_tmp = write("", "x.safetensors", "x.safetensors.tmp");
  EXPECT_EQ(through_tmp.status, 0) << through_tmp.err;
  EXPECT_EQ(slurp(dir_ / "x.safetensors.tmp"), in_before);
  EXPECT_TRUE(fs::exists(dir_ / "x.safetensors"));
}

// A write that fails part-way (here a file size limit, as a full disk would) leaves the output
// file as it was: the bytes go to a temporary OUT.tmp.XXXXXX, renamed over OUT only when whole.
// kvq itself ignores SIGXFSZ, whose default action would kill it mid-write with the temporary left
// behind.
TEST_F(WriteReadCli, AFailedWriteLeavesTheOutputAsItWas) {
  save_safetensors(path("first.safetensors"), input_.tensors(0, 120));
  ASSERT_EQ(write("", "cache.safetensors", "first.safetensors").status, 0);
  const std::string before = slurp(dir_ / "cache.safetensors");
  ASSERT_GT(before.size(), 16u * 1024);
  const test::CliResult r = kvq("write " + config_.string() + " --input " + path("in.safetensors") +
                                    " --output " + path("cache.safetensors"),
                                "ulimit -f 16; ");
  expect_failure(r, 1, path("cache.safetensors.tmp."));
  EXPECT_NE(r.err.find(": cannot write it: File too large\n"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir_ / "cache.safetensors"), before);
  EXPECT_TRUE(temporary_files_of(dir_ / "cache.safetensors").empty());
}

// Bad input changes nothing: an in-place `kvq write --cache C --output C` whose slot_mapping is
// refused -- a slot past the cache (the writer's check), a repeated slot (kvq write's own), in I64
// and in I32 -- exits 2 and leaves C byte for byte as it was, with no temporary beside it.
TEST_F(WriteReadCli, AnInPlaceWriteWithBadSlotsLeavesTheCacheAsItWas) {
  save_safetensors(path("first.safetensors"), input_.tensors(0, 120));
  ASSERT_EQ(write("", "cache.safetensors", "first.safetensors").status, 0);
  const std::string before = slurp(dir_ / "cache.safetensors");
  ASSERT_GT(before.size(), static_cast<size_t>(kBlocks * kPage));
  const std::string in_place = "--cache " + path("cache.safetensors");
  const auto expect_unchanged = [&](const std::string& input, const std::string& message) {
    SCOPED_TRACE(input);
    expect_failure(write(in_place, "cache.safetensors", input), 2, path(input) + ": " + message);
    EXPECT_EQ(slurp(dir_ / "cache.safetensors"), before) << "a refused write changed the cache";
    EXPECT_TRUE(temporary_files_of(dir_ / "cache.safetensors").empty());
  };
  // Tokens 120..299 (the next step of the same sequences), token 153 (index 33) past the cache.
  const int64_t past = input_.slots[153];
  input_.slots[153] = kBlocks * kBlockSize;
  save_safetensors(path("past.safetensors"), input_.tensors(120, kTokens));
  expect_unchanged("past.safetensors", "slot_mapping[33] = 384: expected < 384");
  std::vector<int32_t> slots32;
  for (int64_t i = 120; i < kTokens; ++i) slots32.push_back(static_cast<int32_t>(input_.slots[i]));
  auto second = input_.tensors(120, kTokens);
  second[2].view = make_view(slots32.data(), DType::i32, {kTokens - 120});
  save_safetensors(path("past_i32.safetensors"), second);
  expect_unchanged("past_i32.safetensors", "slot_mapping[33] = 384: expected < 384");
  input_.slots[153] = past;
  // Token 155 (index 35) in token 154's slot.
  input_.slots[155] = input_.slots[154];
  save_safetensors(path("twice.safetensors"), input_.tensors(120, kTokens));
  expect_unchanged("twice.safetensors",
                   fmt::format("tensor 'slot_mapping': slot_mapping[35] = {}, the same slot as "
                               "slot_mapping[34]",
                               input_.slots[154]));
}

TEST_F(WriteReadCli, ACacheLargerThanMemoryIsRefusedWithItsSize) {
  KVQ_SKIP_UNDER_ASAN("the cache's std::bad_alloc is an abort there");
  std::string big = kConfig;
  big.replace(big.find("num_blocks: 24"), 14, "num_blocks: 100000000000");
  std::ofstream(path("big.yaml")) << big;
  const test::CliResult r = kvq("write " + path("big.yaml") + " --input " + path("in.safetensors") +
                                " --output " + path("c.safetensors"));
  expect_failure(r, 1, path("big.yaml") + ": a cache of ");
  EXPECT_NE(r.err.find("(cache.num_blocks 100000000000 x page_bytes "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") does not fit in host memory"), std::string::npos) << r.err;
}

// A file that is not safetensors is refused from its first 8 bytes, whatever its size: here 64 GiB
// (sparse) under a 4 GB address-space limit, which reading it first would not survive.
TEST_F(WriteReadCli, AHugeFileThatIsNotSafetensorsIsRefusedFromItsHeader) {
  KVQ_SKIP_UNDER_ASAN("kvq cannot start under ulimit -v");
  const fs::path big = dir_ / "big.safetensors";
  std::ofstream(big) << "XXXXXXXX";
  std::error_code ec;
  fs::resize_file(big, uint64_t{64} << 30, ec);
  if (ec) GTEST_SKIP() << "no sparse 64 GiB file here: " << ec.message();
  const test::CliResult r = kvq("write " + config_.string() + " --input " + big.string() +
                                    " --output " + path("c.safetensors"),
                                "ulimit -v 4000000; ");
  expect_failure(r, 2, big.string() + ": header length 6365935209750747224 exceeds the limit of ");
}

// kvq read's outputs, key and value F32 [T, H, D], are sized from the slot-mapping file: 65536
// padding slots x 65536 heads x head_size 16 need 256 GiB each. Refused like a cache that does
// not fit (exit 1, the size given), here under a 4 GB address-space limit so that no machine
// tries to fill them, naming the slot-mapping file; no output file.
TEST_F(WriteReadCli, ReadOutputsLargerThanMemoryAreRefusedWithTheirSize) {
  KVQ_SKIP_UNDER_ASAN("the outputs' std::bad_alloc is an abort there, and ulimit -v stops kvq");
  std::string wide = kConfig;
  wide.replace(wide.find("num_blocks: 24"), 14, "num_blocks: 1");
  wide.replace(wide.find("block_size: 16"), 14, "block_size: 1");
  wide.replace(wide.find("num_kv_heads: 2"), 15, "num_kv_heads: 65536");
  wide.replace(wide.find("head_size: 128"), 14, "head_size: 16");
  wide.replace(wide.find("v_scales: sm100_swizzled"), 24, "v_scales: linear");
  std::ofstream(path("wide.yaml")) << wide;
  // A cache of that layout: kvq write with one padding token.
  std::vector<uint16_t> row(65536 * 16, 0x3F80);  // bf16 1.0
  int64_t pad = -1;
  save_safetensors(path("one.safetensors"),
                   {{"key", make_view(row.data(), DType::bf16, {1, 65536, 16})},
                    {"value", make_view(row.data(), DType::bf16, {1, 65536, 16})},
                    {"slot_mapping", make_view(&pad, DType::i64, {1})}});
  ASSERT_EQ(write_with(path("wide.yaml"), "", "wide.safetensors", "one.safetensors").status, 0);
  std::vector<int64_t> slots(65536, -1);
  save_safetensors(path("many.safetensors"),
                   {{"slot_mapping", make_view(slots.data(), DType::i64, {65536})}});
  const test::CliResult r = kvq(
      "read " + path("wide.yaml") + " --cache " + path("wide.safetensors") + " --slot-mapping " +
          path("many.safetensors") + " --output " + path("out.safetensors"),
      "ulimit -v 4000000; ");
  expect_failure(r, 1,
                 path("many.safetensors") +
                     ": an output of 549755813888 bytes (key and value F32 [65536, 65536, 16], "
                     "274877906944 bytes each) does not fit in host memory");
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

// The README's write and read commands on the file examples/make_kv.py makes (its default is
// configs/nvfp4_sm100.yaml's geometry), through the reference backend.
TEST_F(WriteReadCli, TheReadmeRecipeWritesAndReads) {
  const fs::path script = source_ / "examples" / "make_kv.py";
  const std::string made = path("kv.safetensors");
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with numpy (scripts/install-deps.sh installs it)";
  }
  ASSERT_EQ(
      std::system(("/usr/bin/python3 " + script.string() + " " + made + " >/dev/null").c_str()), 0);
  const std::string config = (source_ / "configs" / "nvfp4_sm100.yaml").string();
  const test::CliResult w = kvq("write " + config + " --backend reference_cpu --input " + made +
                                " --output " + path("cache.safetensors"));
  ASSERT_EQ(w.status, 0) << w.err;
  EXPECT_EQ(w.out.rfind(made + ": wrote 64 tokens (0 padding) with reference_cpu", 0), 0u) << w.out;
  const test::CliResult r =
      kvq("read " + config + " --backend reference_cpu --cache " + path("cache.safetensors") +
          " --slot-mapping " + made + " --output " + path("kv_back.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  const SafetensorsFile back = SafetensorsFile::load(path("kv_back.safetensors"));
  EXPECT_EQ(back.at("key").shape, (std::vector<int64_t>{64, 8, 128}));
}

}  // namespace
}  // namespace kvq
