#include "sharded_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"

namespace kvq::demo {

namespace {

void check(const Status& s, const std::string& what) {
  if (!s) throw Error(s.code(), fmt::format("{}: {}", what, s.message()));
}

}  // namespace

ShardedCache::ShardedCache(const Backend& backend, const BackendOptions& options,
                           int64_t num_shards, int64_t max_write_tokens, int64_t max_read_tokens,
                           const std::vector<Device>& devices)
    : options_(options),
      head_size_(options.cache.head_size),
      max_write_tokens_(max_write_tokens),
      max_read_tokens_(max_read_tokens) {
  const int64_t heads = options.cache.num_kv_heads;
  if (num_shards < 1 || heads % num_shards != 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} KV heads cannot be split into {} equal shards", heads, num_shards));
  }
  if (!devices.empty() && static_cast<int64_t>(devices.size()) != num_shards) {
    throw Error(ErrorCode::internal,
                fmt::format("{} devices given for {} shards", devices.size(), num_shards));
  }
  const int64_t per_shard = heads / num_shards;
  for (int64_t i = 0; i < num_shards; ++i) {
    BackendOptions o = options;
    o.cache.num_kv_heads = per_shard;
    if (!devices.empty()) o.device = devices[static_cast<std::size_t>(i)];
    if (num_shards == 1) {
      shards_.push_back(make_shard(backend, o, 0));
      continue;
    }
    try {
      shards_.push_back(make_shard(backend, o, i * per_shard));
    } catch (const Error& e) {
      throw Error(
          e.code(),
          fmt::format("shard {} of {} (KV heads {}..{}, {}): {}", i, num_shards, i * per_shard,
                      (i + 1) * per_shard - 1,
                      o.device ? to_string(*o.device) : "the backend's default device", e.what()),
          e.key());
    }
  }
}

ShardedCache::Shard ShardedCache::make_shard(const Backend& backend, const BackendOptions& o,
                                             int64_t head_begin) const {
  Shard s;
  s.head_begin = head_begin;
  s.num_heads = o.cache.num_kv_heads;
  s.runtime = backend.make_runtime(o);
  s.writer = backend.make_writer(o);
  s.reader = backend.make_reader(o);
  // A backend that put a shard elsewhere than asked would make "one shard per device" a lie.
  for (const Device d : {s.runtime->device(), s.writer->device(), s.reader->device()}) {
    if (!(d == s.writer->device()) || (o.device && !(d == *o.device))) {
      throw Error(
          ErrorCode::internal,
          fmt::format("backend '{}': asked for {}, its runtime is on {}, its writer on {} "
                      "and its reader on {}",
                      backend.info().name, o.device ? to_string(*o.device) : "its default device",
                      to_string(s.runtime->device()), to_string(s.writer->device()),
                      to_string(s.reader->device())));
    }
  }
  const auto row = static_cast<std::size_t>(s.num_heads * head_size_);
  const auto w = static_cast<std::size_t>(max_write_tokens_);
  const auto r = static_cast<std::size_t>(max_read_tokens_);
  // The cache is the one buffer whose size the config sets: one its device cannot hold is the
  // config's to fix (exit 2 at cache.num_blocks), not a failure of the run. (A cache in host
  // memory was checked against the host before this: DemoRun::check_memory.)
  try {
    s.cache = DeviceBuffer(s.runtime, s.writer->layout().cache_bytes(), "the KV cache");
  } catch (const Error& e) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("{} blocks of {} bytes do not fit on {}: {}", o.cache.num_blocks,
                    s.writer->layout().page_bytes(), to_string(s.runtime->device()), e.what()),
        "cache.num_blocks");
  }
  s.cache.fill(0);
  s.key = DeviceBuffer(s.runtime, w * row * 2, "the key staging buffer");
  s.value = DeviceBuffer(s.runtime, w * row * 2, "the value staging buffer");
  s.slots = DeviceBuffer(s.runtime, std::max(w, r) * 8, "the slot mapping staging buffer");
  s.read_key = DeviceBuffer(s.runtime, r * row * 4, "the key read-back buffer");
  s.read_value = DeviceBuffer(s.runtime, r * row * 4, "the value read-back buffer");
  return s;
}

template <class T>
const T* ShardedCache::slice(const T* rows, int64_t tokens, const Shard& s,
                             std::vector<T>& scratch) const {
  const int64_t heads = options_.cache.num_kv_heads;
  if (s.num_heads == heads) return rows;
  const auto row = static_cast<std::size_t>(s.num_heads * head_size_);
  scratch.resize(static_cast<std::size_t>(tokens) * row);
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(scratch.data() + static_cast<std::size_t>(t) * row,
                rows + (t * heads + s.head_begin) * head_size_, row * sizeof(T));
  }
  return scratch.data();
}

double ShardedCache::write(const uint16_t* key, const uint16_t* value, const int64_t* slots,
                           int64_t tokens, std::vector<ShardWriteTimes>* times) {
  if (tokens > max_write_tokens_) {
    throw Error(ErrorCode::internal, fmt::format("write of {} tokens: the staging buffers hold {}",
                                                 tokens, max_write_tokens_));
  }
  // Staging, not timed: every shard's inputs on its device before any write is issued.
  std::vector<WriteArgs> args(shards_.size());
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    Shard& s = shards_[i];
    const auto row = static_cast<std::size_t>(s.num_heads * head_size_);
    const auto n = static_cast<std::size_t>(tokens);
    s.key.upload(slice(key, tokens, s, scratch_key_), n * row * 2);
    s.value.upload(slice(value, tokens, s, scratch_value_), n * row * 2);
    s.slots.upload(slots, n * 8);
    check(s.runtime->synchronize(), "synchronizing before a write");

    const Device d = s.runtime->device();
    WriteArgs& a = args[i];
    a.key = make_view(s.key.data(), DType::bf16, {tokens, s.num_heads, head_size_}, d);
    a.value = make_view(s.value.data(), DType::bf16, {tokens, s.num_heads, head_size_}, d);
    a.slot_mapping = make_view(s.slots.data(), DType::i64, {tokens}, d);
    a.cache = cache_view(s.writer->layout(), s.cache.data(), d);
    a.k_scale = options_.cache.k_scale;
    a.v_scale = options_.cache.v_scale;
    a.stream = s.runtime->stream();
  }

  // Issue all, then synchronize all: writers on different devices (or streams) run at once.
  std::vector<ShardWriteTimes> local;
  std::vector<ShardWriteTimes>& t = times ? *times : local;
  t.assign(shards_.size(), {});
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    t[i].start = std::chrono::steady_clock::now();
    check(shards_[i].writer->write(args[i]), "write");
    t[i].issued = std::chrono::steady_clock::now();
  }
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    check(shards_[i].runtime->synchronize(), "synchronizing after a write");
    t[i].end = std::chrono::steady_clock::now();
  }
  return std::chrono::duration<double>(t.back().end - t.front().start).count();
}

void ShardedCache::read(const int64_t* slots, int64_t tokens, float* key, float* value) {
  if (tokens > max_read_tokens_) {
    throw Error(ErrorCode::internal, fmt::format("read of {} tokens: the read buffers hold {}",
                                                 tokens, max_read_tokens_));
  }
  const int64_t heads = options_.cache.num_kv_heads;
  for (Shard& s : shards_) {
    const auto row = static_cast<std::size_t>(s.num_heads * head_size_);
    const auto n = static_cast<std::size_t>(tokens);
    s.slots.upload(slots, n * 8);
    const Device d = s.runtime->device();
    ReadArgs args;
    args.cache = cache_view(s.reader->layout(), s.cache.data(), d);
    args.slot_mapping = make_view(s.slots.data(), DType::i64, {tokens}, d);
    args.key = make_view(s.read_key.data(), DType::f32, {tokens, s.num_heads, head_size_}, d);
    args.value = make_view(s.read_value.data(), DType::f32, {tokens, s.num_heads, head_size_}, d);
    args.k_scale = options_.cache.k_scale;
    args.v_scale = options_.cache.v_scale;
    args.stream = s.runtime->stream();
    check(s.reader->read(args), "read");
    if (s.num_heads == heads) {
      s.read_key.download(key, n * row * 4);
      s.read_value.download(value, n * row * 4);
      continue;
    }
    scratch_read_key_.resize(n * row);
    scratch_read_value_.resize(n * row);
    s.read_key.download(scratch_read_key_.data(), n * row * 4);
    s.read_value.download(scratch_read_value_.data(), n * row * 4);
    for (std::size_t t = 0; t < n; ++t) {
      const auto dst = (static_cast<int64_t>(t) * heads + s.head_begin) * head_size_;
      std::memcpy(key + dst, scratch_read_key_.data() + t * row, row * 4);
      std::memcpy(value + dst, scratch_read_value_.data() + t * row, row * 4);
    }
  }
}

int64_t ShardedCache::take_out_of_range_slots() {
  int64_t total = 0;
  for (Shard& s : shards_) {
    int64_t n = 0;
    check(s.writer->take_out_of_range_slots(&n), "counting out-of-range slots");
    total += n;
  }
  return total;
}

std::vector<uint8_t> ShardedCache::cache_bytes(int64_t shard) const {
  const Shard& s = shards_.at(static_cast<std::size_t>(shard));
  std::vector<uint8_t> bytes(s.cache.bytes());
  s.cache.download(bytes.data(), bytes.size());
  return bytes;
}

const PageLayout& ShardedCache::layout(int64_t shard) const {
  return shards_.at(static_cast<std::size_t>(shard)).writer->layout();
}

uint64_t ShardedCache::page_bytes() const {
  uint64_t total = 0;
  for (const Shard& s : shards_) total += s.writer->layout().page_bytes();
  return total;
}

std::string ShardedCache::device_name() const {
  std::string out;
  for (const Shard& s : shards_) {
    const std::string name = s.runtime->device_name();
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

}  // namespace kvq::demo
