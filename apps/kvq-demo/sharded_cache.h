#pragma once
// The paged cache on a backend's device, written and read through the backend's writer and
// reader. It is split by KV heads into shards, each with its own writer, reader, runtime (so its
// own stream), cache and staging buffers, on its own device, sharing nothing: tensor parallelism
// (shard s holds heads [s * H / N, (s + 1) * H / N); `kvq-demo --tensor-parallel N`).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvq/core/device_buffer.h"
#include "kvq/core/registry.h"

namespace kvq::demo {

// One shard's part of one write, on the host's steady clock: `start` just before the write was
// issued, `issued` when the writer's write() returned (a GPU writer only queues the kernel; a CPU
// writer has done the work), `end` when the shard's synchronize() returned.
struct ShardWriteTimes {
  std::chrono::steady_clock::time_point start, issued, end;
};

class ShardedCache {
 public:
  // `options` describes the whole cache (all H heads); each shard gets a copy with its own
  // num_kv_heads. `max_write_tokens` / `max_read_tokens` size the staging buffers.
  // `devices`: one per shard (options.device for every shard when empty). Throws kvq::Error when
  // the backend cannot make a writer, reader or runtime (with more than one shard the message
  // starts "shard I of N (KV heads A..B, DEVICE): "), or H is not a multiple of num_shards.
  ShardedCache(const Backend& backend, const BackendOptions& options, int64_t num_shards,
               int64_t max_write_tokens, int64_t max_read_tokens,
               const std::vector<Device>& devices = {});

  // Writes T tokens: key, value [T, H, D] bf16 bits on the host, slots [T] (-1 = padding).
  // Stages every shard's head slice to its device first; then issues every shard's write, each on
  // its own runtime's stream, before synchronizing any (so shards on different devices overlap),
  // then synchronizes them in shard order. Returns the seconds from the first issue to the last
  // synchronize; `times` (if not null) gets each shard's timestamps. Throws kvq::Error on a failed
  // write.
  double write(const uint16_t* key, const uint16_t* value, const int64_t* slots, int64_t tokens,
               std::vector<ShardWriteTimes>* times = nullptr);

  // Dequantizes the K/V of `tokens` slots through the readers: key, value [T, H, D] f32 on the
  // host.
  void read(const int64_t* slots, int64_t tokens, float* key, float* value);

  // Slots past the end that the writers skipped (GPU writers count them on the device); must be 0.
  int64_t take_out_of_range_slots();

  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  int64_t head_begin(int64_t shard) const { return at(shard).head_begin; }
  int64_t num_heads(int64_t shard) const { return at(shard).num_heads; }
  Device device(int64_t shard) const { return at(shard).runtime->device(); }
  std::string device_name(int64_t shard) const { return at(shard).runtime->device_name(); }
  // Shard s's runtime (its device and stream) and its cache's memory on that device, for the
  // backend's attention over the shard's pages (gpu_attention.h).
  const std::shared_ptr<DeviceRuntime>& runtime(int64_t shard) const { return at(shard).runtime; }
  void* cache_data(int64_t shard) const { return at(shard).cache.data(); }
  // Shard s's whole cache, [num_blocks, page_bytes] bytes, copied to the host.
  std::vector<uint8_t> cache_bytes(int64_t shard) const;
  const PageLayout& layout(int64_t shard) const;
  // Bytes of one page summed over the shards (one block of the logical cache).
  uint64_t page_bytes() const;
  std::string device_name() const;  // the runtimes' names, joined with ", " when they differ

 private:
  struct Shard {
    int64_t head_begin = 0;
    int64_t num_heads = 0;
    std::shared_ptr<DeviceRuntime> runtime;
    std::shared_ptr<KVCacheWriter> writer;
    std::shared_ptr<KVCacheReader> reader;
    DeviceBuffer cache;                 // [num_blocks, page_bytes] u8
    DeviceBuffer key, value;            // [max_write_tokens, heads, D] bf16
    DeviceBuffer slots;                 // [max(max_write_tokens, max_read_tokens)] i64
    DeviceBuffer read_key, read_value;  // [max_read_tokens, heads, D] f32
  };

  // A shard of o.cache.num_kv_heads heads from head_begin, on o.device.
  Shard make_shard(const Backend& backend, const BackendOptions& o, int64_t head_begin) const;
  const Shard& at(int64_t shard) const { return shards_.at(static_cast<std::size_t>(shard)); }

  // Rows [T, H, D] -> the shard's [T, heads, D] slice, contiguous (no copy for a single shard).
  template <class T>
  const T* slice(const T* rows, int64_t tokens, const Shard& s, std::vector<T>& scratch) const;

  BackendOptions options_;
  int64_t head_size_ = 0;
  int64_t max_write_tokens_ = 0;
  int64_t max_read_tokens_ = 0;
  std::vector<Shard> shards_;
  std::vector<uint16_t> scratch_key_, scratch_value_;
  std::vector<float> scratch_read_key_, scratch_read_value_;
};

}  // namespace kvq::demo
