// Tensor parallelism on the cuda writer (label gpu; issue 9): KV-head shards written by
// separate writers, each with its own DeviceRuntime (so its own stream) and its own cache, hold
// exactly the bytes one writer over all heads gives, head region by head region as the layout
// places them: on one GPU, and on two GPUs concurrently when the machine has them. Also the device
// contract the shards rely on: BackendOptions.device is where the writer runs, a device that
// does not exist or is not a GPU is refused, and tensors or streams of another device are refused
// with a clear error. Every test skips with "no CUDA device: <reason>" where there is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_device_runtime.h"
#include "cuda_writer.h"
#include "guard_bands.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/page_layout.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "probe.h"
#include "require_gpu.h"
#include "shard_compare.h"

namespace kvq::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// 0 and the probe's reason when there is no usable CUDA device.
int device_count(std::string* why) {
  int count = 0;
  const Status s = cuda_device_count(&count);
  if (!s) {
    *why = s.message();
    return 0;
  }
  return count;
}

// No device at all: a skip, or a failure under KVQ_REQUIRE_GPU (require_gpu.h); fewer than n:
// always a skip (a one-GPU machine is fine).
#define REQUIRE_DEVICES(n)                                                                     \
  do {                                                                                         \
    std::string why_;                                                                          \
    const int count_ = device_count(&why_);                                                    \
    if (count_ == 0) KVQ_NO_CUDA_DEVICE(why_);                                                 \
    if (count_ < (n)) {                                                                        \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << count_ << " ("  \
                   << "the two-device case of issue 9 runs on a machine with 2 or more GPUs)"; \
    }                                                                                          \
  } while (0)

void expect_ok(const Status& s, const std::string& what) {
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.message();
}

CacheSpec spec(int64_t heads, const char* order, const char* k_scales, const char* v_scales,
               int64_t num_blocks = 64) {
  CacheSpec s;
  s.num_blocks = num_blocks;
  s.block_size = 16;
  s.num_kv_heads = heads;
  s.head_size = 128;
  s.layout = {order, k_scales, v_scales};
  s.k_scale = 0.75f;
  s.v_scale = 1.5f;
  return s;
}

// One write: key and value [T, H, D] bf16 bits, slots [T] (distinct, ~10% padding).
struct Rows {
  int64_t tokens = 0, heads = 0, dim = 0;
  std::vector<uint16_t> key, value;
  std::vector<int64_t> slots;
};

Rows make_rows(const CacheSpec& s, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> magnitude(-10, 10);
  Rows r;
  r.tokens = tokens;
  r.heads = s.num_kv_heads;
  r.dim = s.head_size;
  const auto n = static_cast<std::size_t>(tokens * r.heads * r.dim);
  for (auto* side : {&r.key, &r.value}) {
    side->resize(n);
    for (std::size_t i = 0; i < n; i += 16) {  // a magnitude per 16-element group
      const float m = std::ldexp(1.0f, magnitude(rng));
      for (std::size_t j = i; j < i + 16; ++j) {
        const float f = normal(rng) * m;
        uint32_t bits = 0;
        std::memcpy(&bits, &f, sizeof bits);
        (*side)[j] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }
  std::vector<int64_t> all(static_cast<std::size_t>(s.num_blocks * s.block_size));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::uniform_int_distribution<int> pad(0, 9);
  for (int64_t t = 0; t < tokens; ++t) {
    r.slots.push_back(pad(rng) == 0 ? -1 : all[static_cast<std::size_t>(t)]);
  }
  return r;
}

// KV heads [head_begin, head_begin + heads) of `r`, contiguous [T, heads, D].
std::vector<uint16_t> head_slice(const std::vector<uint16_t>& rows, const Rows& r,
                                 int64_t head_begin, int64_t heads) {
  std::vector<uint16_t> out(static_cast<std::size_t>(r.tokens * heads * r.dim));
  for (int64_t t = 0; t < r.tokens; ++t) {
    std::memcpy(out.data() + t * heads * r.dim, rows.data() + (t * r.heads + head_begin) * r.dim,
                static_cast<std::size_t>(heads * r.dim) * 2);
  }
  return out;
}

constexpr uint8_t kPoison = 0x5a;  // the caches' bytes before any write: unwritten bytes show
constexpr uint8_t kGuard = 0xa7;   // the guard bands' bytes around each cache, always

// One shard: KV heads [head_begin, head_begin + heads) on cuda:`ordinal`, with its own runtime
// (stream), writer, staging buffers and cache, sharing nothing with other shards. The cache lies
// between two guard bands of a page or more (a multiple of 4 KiB: the cache keeps cudaMalloc's
// alignment) that no write may change: guards_changed().
class Shard {
 public:
  Shard(const CacheSpec& full, int64_t head_begin, int64_t heads, int ordinal)
      : head_begin_(head_begin), k_scale_(full.k_scale), v_scale_(full.v_scale) {
    BackendOptions o;
    o.cache = full;
    o.cache.num_kv_heads = heads;
    o.device = Device::cuda(ordinal);
    DeviceRuntime* rt = nullptr;
    status_ = make_cuda_device_runtime(o, &rt);
    runtime_.reset(rt);
    if (!status_) return;
    KVCacheWriter* w = nullptr;
    status_ = CudaWriter::create(o, &w);
    writer_.reset(w);
    if (!status_) return;
    layout_ = std::make_unique<PageLayout>(PageLayout::from_spec(o.cache));
    guard_bytes_ = (std::max<std::size_t>(layout_->page_bytes(), 1) + 4095) / 4096 * 4096;
    const std::size_t bytes = layout_->cache_bytes();
    status_ = runtime_->allocate(guard_bytes_ + bytes + guard_bytes_, &guarded_);
    if (!status_) return;
    cache_ = static_cast<uint8_t*>(guarded_) + guard_bytes_;
    status_ = runtime_->fill(guarded_, kGuard, guard_bytes_);
    if (!status_) return;
    status_ = runtime_->fill(cache_, kPoison, bytes);
    if (!status_) return;
    status_ = runtime_->fill(static_cast<uint8_t*>(cache_) + bytes, kGuard, guard_bytes_);
    if (!status_) return;
    status_ = runtime_->synchronize();
  }
  ~Shard() {
    if (!runtime_) return;
    for (void* p : {key_, value_, slots_, guarded_}) (void)runtime_->release(p);
  }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const Status& status() const { return status_; }
  const PageLayout& layout() const { return *layout_; }
  KVCacheWriter& writer() { return *writer_; }
  DeviceRuntime& runtime() { return *runtime_; }

  // Copies this shard's slice of `r` to its device and synchronizes (not part of the write).
  void stage(const Rows& r) {
    const int64_t heads = layout_->geometry().num_kv_heads;
    const std::vector<uint16_t> k = head_slice(r.key, r, head_begin_, heads);
    const std::vector<uint16_t> v = head_slice(r.value, r, head_begin_, heads);
    for (void* p : {key_, value_, slots_}) expect_ok(runtime_->release(p), "release");
    expect_ok(runtime_->allocate(k.size() * 2, &key_), "allocate key");
    expect_ok(runtime_->allocate(v.size() * 2, &value_), "allocate value");
    expect_ok(runtime_->allocate(r.slots.size() * 8, &slots_), "allocate slots");
    expect_ok(runtime_->copy(key_, k.data(), k.size() * 2, CopyKind::host_to_device), "copy key");
    expect_ok(runtime_->copy(value_, v.data(), v.size() * 2, CopyKind::host_to_device),
              "copy value");
    expect_ok(runtime_->copy(slots_, r.slots.data(), r.slots.size() * 8, CopyKind::host_to_device),
              "copy slots");
    expect_ok(runtime_->synchronize(), "synchronize after staging");
    const Device d = runtime_->device();
    args_ = WriteArgs{};
    args_.key = make_view(key_, DType::bf16, {r.tokens, heads, r.dim}, d);
    args_.value = make_view(value_, DType::bf16, {r.tokens, heads, r.dim}, d);
    args_.slot_mapping = make_view(slots_, DType::i64, {r.tokens}, d);
    args_.cache =
        make_view(cache_, DType::u8,
                  {layout_->geometry().num_blocks, static_cast<int64_t>(layout_->page_bytes())}, d);
    args_.k_scale = k_scale_;
    args_.v_scale = v_scale_;
    args_.stream = runtime_->stream();
  }

  // Queues the write on this shard's stream (no synchronize).
  Status issue() {
    start_ = Clock::now();
    const Status s = writer_->write(args_);
    issued_ = Clock::now();
    return s;
  }
  Status finish() {
    const Status s = runtime_->synchronize();
    end_ = Clock::now();
    return s;
  }

  std::vector<uint8_t> cache_bytes() {
    std::vector<uint8_t> out(layout_->cache_bytes());
    expect_ok(runtime_->copy(out.data(), cache_, out.size(), CopyKind::device_to_host), "download");
    expect_ok(runtime_->synchronize(), "synchronize after download");
    return out;
  }

  // "" when both guard bands around the cache still hold kGuard, else what changed
  // (guard_band_changes).
  std::string guards_changed() {
    const std::size_t bytes = layout_->cache_bytes();
    std::vector<uint8_t> front(guard_bytes_), back(guard_bytes_);
    expect_ok(runtime_->copy(front.data(), guarded_, guard_bytes_, CopyKind::device_to_host),
              "download the guard before the cache");
    expect_ok(runtime_->copy(back.data(), static_cast<uint8_t*>(cache_) + bytes, guard_bytes_,
                             CopyKind::device_to_host),
              "download the guard after the cache");
    const std::vector<uint8_t> want(guard_bytes_, kGuard);
    return ::kvq::test::guard_band_changes(want, front, want, back, bytes, layout_->page_bytes());
  }

  int64_t head_begin() const { return head_begin_; }
  const WriteArgs& args() const { return args_; }  // the staged write
  Clock::time_point start() const { return start_; }
  Clock::time_point issued() const { return issued_; }
  Clock::time_point end() const { return end_; }

 private:
  int64_t head_begin_;
  float k_scale_, v_scale_;
  Status status_;
  std::unique_ptr<DeviceRuntime> runtime_;
  std::unique_ptr<KVCacheWriter> writer_;
  std::unique_ptr<PageLayout> layout_;
  std::size_t guard_bytes_ = 0;
  void *key_ = nullptr, *value_ = nullptr, *slots_ = nullptr;
  void *guarded_ = nullptr, *cache_ = nullptr;  // cache_: guard_bytes_ into guarded_
  WriteArgs args_;
  Clock::time_point start_, issued_, end_;
};

// "" when equal, else the first differing byte and how many differ (never the whole buffers).
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " bytes vs " + std::to_string(want.size());
  }
  std::size_t first = got.size(), count = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (count++ == 0) first = i;
    }
  }
  if (count == 0) return "";
  return std::to_string(count) + " bytes differ, the first at " + std::to_string(first) + ": " +
         std::to_string(got[first]) + " vs " + std::to_string(want[first]);
}

// reference_cpu's bytes for the same writes, starting from the same poisoned cache.
std::vector<uint8_t> reference_bytes(const CacheSpec& s, const std::vector<Rows>& writes) {
  BackendOptions o;
  o.cache = s;
  o.threads = 0;  // every core: the bytes are the same for any thread count
  reference_cpu::ReferenceWriter writer(o);
  std::vector<uint8_t> cache(writer.layout().cache_bytes(), kPoison);
  for (const Rows& r : writes) {
    WriteArgs a;
    a.key = make_view(const_cast<uint16_t*>(r.key.data()), DType::bf16, {r.tokens, r.heads, r.dim});
    a.value =
        make_view(const_cast<uint16_t*>(r.value.data()), DType::bf16, {r.tokens, r.heads, r.dim});
    a.slot_mapping = make_view(const_cast<int64_t*>(r.slots.data()), DType::i64, {r.tokens});
    a.cache = make_view(cache.data(), DType::u8,
                        {s.num_blocks, static_cast<int64_t>(writer.layout().page_bytes())});
    a.k_scale = s.k_scale;
    a.v_scale = s.v_scale;
    const Status st = writer.write(a);
    EXPECT_TRUE(st.is_ok()) << "reference_cpu: " << st.message();
  }
  return cache;
}

// Writes `writes` with one writer over all heads (on cuda:0) and with `devices.size()` shards
// (shard i on cuda:devices[i]), every shard's write issued before any is synchronized; checks the
// single writer against reference_cpu and every shard against the single writer.
void check_shards(const CacheSpec& s, const std::vector<Rows>& writes,
                  const std::vector<int>& devices, bool print_timeline = false) {
  Shard one(s, 0, s.num_kv_heads, 0);
  ASSERT_TRUE(one.status().is_ok()) << one.status().message();
  for (const Rows& r : writes) {
    one.stage(r);
    expect_ok(one.issue(), "single writer");
    expect_ok(one.finish(), "single writer synchronize");
  }
  int64_t skipped = -1;
  expect_ok(one.writer().take_out_of_range_slots(&skipped), "take_out_of_range_slots");
  EXPECT_EQ(skipped, 0);
  const std::vector<uint8_t> full = one.cache_bytes();
  ASSERT_EQ(first_difference(full, reference_bytes(s, writes)), "")
      << "the single cuda writer vs reference_cpu";
  ASSERT_EQ(one.guards_changed(), "") << "the single cuda writer";

  const auto n = static_cast<int64_t>(devices.size());
  const int64_t per = s.num_kv_heads / n;
  std::vector<std::unique_ptr<Shard>> shards;
  for (int64_t i = 0; i < n; ++i) {
    shards.push_back(
        std::make_unique<Shard>(s, i * per, per, devices[static_cast<std::size_t>(i)]));
    ASSERT_TRUE(shards.back()->status().is_ok()) << shards.back()->status().message();
    EXPECT_EQ(shards.back()->writer().device(), Device::cuda(devices[static_cast<std::size_t>(i)]));
  }
  // Distinct streams: each shard's runtime has its own.
  for (int64_t i = 1; i < n; ++i) {
    EXPECT_NE(shards[static_cast<std::size_t>(i)]->runtime().stream(),
              shards[0]->runtime().stream());
  }
  for (const Rows& r : writes) {
    for (auto& sh : shards) sh->stage(r);
    for (auto& sh : shards) expect_ok(sh->issue(), "shard write");
    for (auto& sh : shards) expect_ok(sh->finish(), "shard synchronize");
    if (print_timeline) {
      const Clock::time_point t0 = shards[0]->start();
      auto us = [&](Clock::time_point t) {
        return std::chrono::duration<double, std::micro>(t - t0).count();
      };
      for (std::size_t i = 0; i < shards.size(); ++i) {
        std::printf(
            "  write of %lld tokens, shard %zu on cuda:%d: start %.1f us, issued %.1f us, "
            "end %.1f us\n",
            static_cast<long long>(r.tokens), i, devices[i], us(shards[i]->start()),
            us(shards[i]->issued()), us(shards[i]->end()));
      }
    }
  }
  uint64_t total = 0;
  for (auto& sh : shards) {
    int64_t sk = -1;
    expect_ok(sh->writer().take_out_of_range_slots(&sk), "take_out_of_range_slots");
    EXPECT_EQ(sk, 0);
    const std::vector<uint8_t> bytes = sh->cache_bytes();
    total += bytes.size();
    EXPECT_EQ(kvq::test::compare_shard(one.layout(), full, sh->layout(), bytes, sh->head_begin()),
              "")
        << "shard of KV heads from " << sh->head_begin();
    EXPECT_EQ(sh->guards_changed(), "") << "shard of KV heads from " << sh->head_begin();
  }
  EXPECT_EQ(total, full.size());
}

using Arrangement = std::tuple<const char*, const char*, const char*>;
const std::vector<Arrangement> kArrangements = {{"HND", "linear", "sm100_swizzled"},
                                                {"HND", "sm100_swizzled", "sm100_swizzled"},
                                                {"NHD", "linear", "linear"},
                                                {"NHD", "sm100_swizzled", "linear"}};

TEST(TwoWriters, HeadShardsOnOneGpuGiveTheSingleWritersBytes) {
  REQUIRE_DEVICES(1);
  for (const auto& [order, ks, vs] : kArrangements) {
    SCOPED_TRACE(std::string(order) + " K " + ks + " V " + vs);
    const CacheSpec s = spec(8, order, ks, vs);
    // A prefill-sized write, then a decode-sized one into other pages.
    const std::vector<Rows> writes = {make_rows(s, 700, 1), make_rows(s, 9, 2)};
    for (const std::vector<int>& devices : std::vector<std::vector<int>>{{0, 0}, {0, 0, 0, 0}}) {
      SCOPED_TRACE(std::to_string(devices.size()) + " shards on cuda:0");
      check_shards(s, writes, devices);
    }
  }
}

TEST(TwoWriters, HeadShardsOnTwoGpusConcurrently) {
  REQUIRE_DEVICES(2);
  for (const auto& [order, ks, vs] : kArrangements) {
    SCOPED_TRACE(std::string(order) + " K " + ks + " V " + vs);
    const CacheSpec s = spec(8, order, ks, vs);
    check_shards(s, {make_rows(s, 700, 3), make_rows(s, 9, 4)}, {0, 1});
  }
  // Large writes, timestamps printed: the second device is issued before the first finishes.
  const CacheSpec big = spec(16, "HND", "linear", "sm100_swizzled", 1024);
  std::printf("two writers on cuda:0 and cuda:1, 16 KV heads x 128, 16384 tokens:\n");
  check_shards(big, {make_rows(big, 16384, 5), make_rows(big, 16384, 6)}, {0, 1}, true);
}

// ---- the device contract ------------------------------------------------------------------------

TEST(TwoWriters, WriterRunsOnTheAskedDeviceAndRefusesOthers) {
  REQUIRE_DEVICES(1);
  std::string why;
  const int count = device_count(&why);
  BackendOptions o;
  o.cache = spec(2, "HND", "linear", "sm100_swizzled", 4);

  // Unset: cuda:0. Set: that device, writer and runtime alike.
  KVCacheWriter* w = nullptr;
  expect_ok(CudaWriter::create(o, &w), "writer on the default device");
  std::unique_ptr<KVCacheWriter> dflt(w);
  EXPECT_EQ(dflt->device(), Device::cuda(0));
  o.device = Device::cuda(count - 1);
  expect_ok(CudaWriter::create(o, &w), "writer on the last device");
  std::unique_ptr<KVCacheWriter> last(w);
  EXPECT_EQ(last->device(), Device::cuda(count - 1));
  DeviceRuntime* rt = nullptr;
  expect_ok(make_cuda_device_runtime(o, &rt), "runtime on the last device");
  std::unique_ptr<DeviceRuntime> runtime(rt);
  EXPECT_EQ(runtime->device(), Device::cuda(count - 1));

  // A device that does not exist, and the CPU.
  o.device = Device::cuda(count);
  w = nullptr;
  Status s = CudaWriter::create(o, &w);
  EXPECT_EQ(w, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::unavailable);
  EXPECT_EQ(s.message(), "cuda:" + std::to_string(count) +
                             " does not exist: " + std::to_string(count) + " CUDA device" +
                             (count == 1 ? "" : "s") + " found");
  rt = nullptr;
  s = make_cuda_device_runtime(o, &rt);
  EXPECT_EQ(rt, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::unavailable);
  EXPECT_EQ(s.message(), "cuda:" + std::to_string(count) + " requested, but this machine has " +
                             std::to_string(count) + " CUDA device(s)");
  o.device = Device::cpu();
  s = CudaWriter::create(o, &w);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(), "cuda works on CUDA device memory: expected device cuda:N, found cpu");
}

// A shard on cuda:0 with a staged write, for writes it must refuse; each must leave its cache and
// guard bands as they were before.
class TwoWritersRefusal : public ::testing::Test {
 protected:
  void stage() {
    const CacheSpec s = spec(4, "HND", "linear", "sm100_swizzled", 8);
    shard_ = std::make_unique<Shard>(s, 0, 4, 0);
    ASSERT_TRUE(shard_->status().is_ok()) << shard_->status().message();
    shard_->stage(make_rows(s, 5, 7));
    before_ = shard_->cache_bytes();
  }
  void expect_cache_unchanged() {
    expect_ok(shard_->runtime().synchronize(), "synchronize");
    EXPECT_EQ(first_difference(shard_->cache_bytes(), before_), "")
        << "a refused write changed the cache";
    EXPECT_EQ(shard_->guards_changed(), "") << "a refused write";
  }

  std::unique_ptr<Shard> shard_;
  std::vector<uint8_t> before_;
};

TEST_F(TwoWritersRefusal, TensorsOfAnotherDeviceAreRefused) {
  REQUIRE_DEVICES(1);
  ASSERT_NO_FATAL_FAILURE(stage());
  // The staged write with one tensor claiming another device: refused before any launch.
  const std::vector<std::tuple<TensorView WriteArgs::*, Device, std::string>> refused = {
      {&WriteArgs::key, Device::cuda(1),
       "key: [5, 4, 128] bf16 cuda:1: expected cuda:0 memory (the writer's device)"},
      {&WriteArgs::value, Device::cuda(3),
       "value: [5, 4, 128] bf16 cuda:3: expected cuda:0 memory (the writer's device)"},
      {&WriteArgs::slot_mapping, Device::cpu(),
       "slot_mapping: [5] i64 cpu: expected cuda:0 memory (the writer's device)"},
      {&WriteArgs::cache, Device::cuda(1),
       "cache: [8, 9216] u8 cuda:1: expected cuda:0 memory (the writer's device)"},
  };
  for (const auto& [member, device, message] : refused) {
    WriteArgs a = shard_->args();
    (a.*member).device = device;
    const Status st = shard_->writer().write(a);
    EXPECT_EQ(st.code(), ErrorCode::invalid_argument) << message;
    EXPECT_EQ(st.message(), message);
  }
  expect_cache_unchanged();
}

TEST_F(TwoWritersRefusal, AStreamOfAnotherDeviceIsRefused) {
  REQUIRE_DEVICES(2);
  ASSERT_NO_FATAL_FAILURE(stage());
  Shard other(spec(4, "HND", "linear", "sm100_swizzled", 8), 0, 4, 1);
  ASSERT_TRUE(other.status().is_ok()) << other.status().message();
  WriteArgs a = shard_->args();
  a.stream = other.runtime().stream();
  const Status st = shard_->writer().write(a);
  EXPECT_EQ(st.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(st.message(),
            "stream belongs to cuda:1: expected a stream of cuda:0 (the writer's device)");
  expect_cache_unchanged();
}

}  // namespace
}  // namespace kvq::cuda
