#include "bench_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <optional>
#include <vector>

#include "bench_data.h"

namespace kvq::app::bench {
namespace {

// The runtime as a DeviceBuffer holds it, not owned: a Target's runtime outlives its runner.
std::shared_ptr<DeviceRuntime> unowned(DeviceRuntime& runtime) {
  return {std::shared_ptr<void>(), &runtime};
}

// A buffer's first byte, for the offsets of its sets.
unsigned char* bytes_of(const DeviceBuffer& buffer) {
  return static_cast<unsigned char*>(buffer.data());
}

// Copies `one` (one set's bytes) into each of `sets` consecutive sets at `dst`, through a host
// staging buffer of at most 64 MiB so that tiny sets cost few copies.
void upload_replicated(DeviceRuntime& runtime, unsigned char* dst, const void* one,
                       uint64_t set_bytes, int64_t sets) {
  if (set_bytes == 0) return;
  const uint64_t per_copy = std::max<uint64_t>(1, (uint64_t{64} << 20) / set_bytes);
  const uint64_t staged = std::min<uint64_t>(per_copy, static_cast<uint64_t>(sets));
  if (staged == 1) {  // large sets: straight from the one copy
    for (int64_t s = 0; s < sets; ++s) {
      throw_if_error(runtime.copy(dst + static_cast<uint64_t>(s) * set_bytes, one, set_bytes,
                                  CopyKind::host_to_device));
    }
    return;
  }
  std::vector<unsigned char> staging(staged * set_bytes);
  for (uint64_t i = 0; i < staged; ++i) std::memcpy(&staging[i * set_bytes], one, set_bytes);
  for (uint64_t s = 0; s < static_cast<uint64_t>(sets); s += staged) {
    const uint64_t n = std::min<uint64_t>(staged, static_cast<uint64_t>(sets) - s);
    throw_if_error(
        runtime.copy(dst + s * set_bytes, staging.data(), n * set_bytes, CopyKind::host_to_device));
  }
}

// Sets that add up to at least `rotation` bytes, at least 2, at most `cap`.
int64_t sets_for(uint64_t set_bytes, uint64_t rotation, int64_t cap) {
  const uint64_t want = (rotation + set_bytes - 1) / std::max<uint64_t>(set_bytes, 1);
  return std::max<int64_t>(2, std::min<int64_t>(cap, static_cast<int64_t>(want)));
}

TensorView view(DType dtype, std::initializer_list<int64_t> shape, Device device) {
  return make_view(nullptr, dtype, shape, device);
}

// A LaunchFn context for the writer or the reader (kCall): each launch takes the next of `sets`
// sets of K/V rows, slots and cache, so consecutive launches (and the graphs the runtime
// captures) never reuse data that is still in a cache.
template <class Op, class Args, Status (Op::*kCall)(const Args&) noexcept>
struct RotatingLaunch {
  Op* op = nullptr;
  Args args;
  unsigned char* keys = nullptr;  // [sets][T, H, D]: the writer's bf16 inputs, the reader's f32
  unsigned char* values = nullptr;
  unsigned char* slots = nullptr;   // [sets][T] i64
  unsigned char* caches = nullptr;  // [sets][num_blocks, page_bytes] u8
  uint64_t kv_set_bytes = 0, slot_set_bytes = 0, cache_set_bytes = 0;
  int64_t sets = 0;
  int64_t next = 0;

  static Status launch(void* context, void* stream) noexcept {
    auto* l = static_cast<RotatingLaunch*>(context);
    const auto s = static_cast<uint64_t>(l->next++ % l->sets);
    l->args.key.data = l->keys + s * l->kv_set_bytes;
    l->args.value.data = l->values + s * l->kv_set_bytes;
    l->args.slot_mapping.data = l->slots + s * l->slot_set_bytes;
    l->args.cache.data = l->caches + s * l->cache_set_bytes;
    l->args.stream = stream;
    return (l->op->*kCall)(l->args);
  }
};
using WriteLaunch = RotatingLaunch<KVCacheWriter, WriteArgs, &KVCacheWriter::write>;
using ReadLaunch = RotatingLaunch<KVCacheReader, ReadArgs, &KVCacheReader::read>;

uint64_t case_seed(uint64_t seed, const Case& c) {
  uint64_t h = seed;
  for (int64_t v : {c.num_kv_heads, c.head_size, c.block_size, c.tokens}) {
    h = (h ^ static_cast<uint64_t>(v)) * 0x100000001B3ull;
  }
  return h;
}

}  // namespace

CaseRunner::CaseRunner(Target target, Settings settings)
    : target_(std::move(target)), settings_(std::move(settings)) {
  if (!target_.runtime || !target_.make_writer) {
    throw Error(ErrorCode::internal, "bench: a target needs a runtime and a writer factory");
  }
  scrub_ =
      DeviceBuffer(unowned(*target_.runtime), settings_.rotation_bytes, "the cache scrub buffer");
}

void CaseRunner::scrub_caches() {
  throw_if_error(target_.runtime->fill(scrub_.data(), 0x3C, settings_.rotation_bytes));
  throw_if_error(target_.runtime->synchronize());
}

CaseResult CaseRunner::run(const Case& c) {
  CaseResult r;
  r.c = c;
  try {
    run_or_throw(c, r);
  } catch (const std::bad_alloc&) {
    r.error = fmt::format("out of host memory for T={} H={} D={} (its inputs, slots and pages)",
                          c.tokens, c.num_kv_heads, c.head_size);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

Measurement CaseRunner::time_launches(LaunchFn launch, void* context, bool graph_allowed,
                                      const ByteCounts& bytes, int64_t sets) {
  DeviceRuntime& rt = *target_.runtime;
  Measurement m;
  m.bytes = bytes;
  m.sets = sets;

  std::vector<double> samples;
  throw_if_error(rt.time(launch, context,
                         TimingOptions{settings_.warmup, settings_.iterations, false}, &samples));
  m.direct = summarize(std::move(samples));
  throw_if_error(
      rt.copy_bandwidth(std::max<uint64_t>(1, bytes.total() / 2), &m.same_size_copy_bps));

  if (!graph_allowed) {
    m.graph_note = "T > " + std::to_string(settings_.graph_max_tokens);
    return m;
  }
  std::vector<double> graph_samples;
  Status s =
      rt.time(launch, context,
              TimingOptions{settings_.warmup, settings_.iterations, true, settings_.graph_launches},
              &graph_samples);
  if (s.code() == ErrorCode::unavailable) {
    m.graph_note = s.message();
  } else {
    throw_if_error(s);
    m.graph = summarize(std::move(graph_samples));
  }
  return m;
}

void CaseRunner::run_or_throw(const Case& c, CaseResult& r) {
  DeviceRuntime& rt = *target_.runtime;
  const Device device = rt.device();
  const uint64_t seed = case_seed(settings_.seed, c);
  const SlotPlan plan = make_slot_plan(c.tokens, c.block_size, seed);
  r.valid_tokens = plan.valid_tokens;
  r.padding_tokens = c.tokens - plan.valid_tokens;
  r.num_blocks = plan.num_blocks;

  BackendOptions options = target_.base;
  options.cache.num_kv_heads = c.num_kv_heads;
  options.cache.head_size = c.head_size;
  options.cache.block_size = c.block_size;
  options.cache.num_blocks = plan.num_blocks;
  if (c.threads > 0) options.threads = c.threads;

  std::shared_ptr<KVCacheWriter> writer = target_.make_writer(options);
  const PageLayout& layout = writer->layout();
  r.page_bytes = layout.page_bytes();
  RowBytes row;
  // Data bytes of a head row plus its scale bytes (none for fp8 and bf16 pages).
  row.packed_row_bytes = int64_t{layout.descriptor().row_bytes} + layout.descriptor().groups;

  const auto T = c.tokens, H = c.num_kv_heads, D = c.head_size;
  const uint64_t cache_set_bytes = layout.cache_bytes();
  // The largest set, the reader's (T x H x D f32 twice, T slots, the pages), in at most 2^62
  // bytes: then no size below (a set, sets x a set) passes 64 bits.
  uint64_t elements = 0, slot_set_bytes = 0, read_set_bytes = 0;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  if (__builtin_mul_overflow(u(T), u(H), &elements) ||
      __builtin_mul_overflow(elements, u(D), &elements) ||
      __builtin_mul_overflow(u(T), uint64_t{8}, &slot_set_bytes) ||
      __builtin_mul_overflow(elements, uint64_t{8}, &read_set_bytes) ||
      __builtin_add_overflow(read_set_bytes, slot_set_bytes, &read_set_bytes) ||
      __builtin_add_overflow(read_set_bytes, cache_set_bytes, &read_set_bytes) ||
      read_set_bytes > (uint64_t{1} << 62)) {
    throw Error(ErrorCode::runtime,
                fmt::format("T={} H={} D={}: its inputs, slots and pages need more than 2^62 bytes",
                            T, H, D));
  }
  // One set's inputs: K and V apart, or one fused QKV buffer of (Q + 2H) heads a token that both
  // views step through.
  const std::optional<int64_t> query_heads = settings_.fused_qkv_query_heads;
  const int64_t token_elements = (query_heads ? *query_heads + 2 * H : H) * D;
  uint64_t input_elements = 0;
  if (__builtin_mul_overflow(u(T), u(token_elements), &input_elements) ||
      input_elements > (uint64_t{1} << 60)) {
    throw Error(ErrorCode::runtime,
                fmt::format("T={} x {} elements a token: the inputs need more than 2^61 bytes", T,
                            token_elements));
  }
  const uint64_t row_set_bytes = input_elements * 2;  // bf16: one tensor, or the fused buffer
  // Sets by the bytes a write touches, K's and V's rows: a fused buffer's query heads are never
  // read, and counting them would rotate too few sets to keep the touched rows out of L2.
  const int64_t sets = sets_for(2 * elements * 2 + slot_set_bytes + cache_set_bytes,
                                settings_.rotation_bytes, settings_.max_sets);

  // One set's contents on the host, replicated into every set on the device.
  DeviceBuffer slots(unowned(rt), slot_set_bytes * sets, "slot mappings");
  DeviceBuffer caches(unowned(rt), cache_set_bytes * sets, "caches");
  upload_replicated(rt, bytes_of(slots), plan.slots.data(), slot_set_bytes, sets);
  {
    std::vector<uint8_t> page_bytes(cache_set_bytes);
    fill_random_page_bytes(page_bytes.data(), page_bytes.size(), seed + 3);
    upload_replicated(rt, bytes_of(caches), page_bytes.data(), cache_set_bytes, sets);
  }
  const bool graph_allowed = T <= settings_.graph_max_tokens;

  {
    DeviceBuffer keys(unowned(rt), row_set_bytes * sets, query_heads ? "fused QKV rows" : "keys");
    std::optional<DeviceBuffer> values;
    if (!query_heads) values.emplace(unowned(rt), row_set_bytes * sets, "values");
    std::vector<uint16_t> host(input_elements);
    fill_random_bf16(host.data(), host.size(), seed + 1);
    upload_replicated(rt, bytes_of(keys), host.data(), row_set_bytes, sets);
    if (values) {
      fill_random_bf16(host.data(), host.size(), seed + 2);
      upload_replicated(rt, bytes_of(*values), host.data(), row_set_bytes, sets);
    }
    host = {};

    WriteLaunch w;
    w.op = writer.get();
    w.args.key = view(DType::bf16, {T, H, D}, device);
    w.args.key.strides[0] = token_elements;
    w.args.value = w.args.key;
    w.args.slot_mapping = view(DType::i64, {T}, device);
    w.args.cache = view(DType::u8, {plan.num_blocks, static_cast<int64_t>(r.page_bytes)}, device);
    w.args.k_scale = options.cache.k_scale;
    w.args.v_scale = options.cache.v_scale;
    w.keys = bytes_of(keys);
    w.values = values ? bytes_of(*values) : bytes_of(keys);
    if (query_heads) {  // K's heads after the query heads, V's after K's
      w.keys += static_cast<uint64_t>(*query_heads * D) * 2;
      w.values += static_cast<uint64_t>((*query_heads + H) * D) * 2;
    }
    w.slots = bytes_of(slots);
    w.caches = bytes_of(caches);
    w.kv_set_bytes = row_set_bytes;
    w.slot_set_bytes = slot_set_bytes;
    w.cache_set_bytes = cache_set_bytes;
    w.sets = sets;
    scrub_caches();
    r.write = time_launches(&WriteLaunch::launch, &w, graph_allowed,
                            write_bytes(T, plan.valid_tokens, H, D, row), sets);
    r.write->bytes_all_rows = write_bytes(T, T, H, D, row);
    int64_t skipped = 0;
    throw_if_error(writer->take_out_of_range_slots(&skipped));
    if (skipped != 0) {
      throw Error(ErrorCode::internal, "the writer skipped " + std::to_string(skipped) +
                                           " out-of-range slots; the bench makes none");
    }
  }  // keys and values released before the reader's outputs are allocated

  if (!target_.make_reader) return;
  std::shared_ptr<KVCacheReader> reader = target_.make_reader(options);
  const uint64_t out_set_bytes = elements * 4;  // f32
  const int64_t read_sets =
      std::min(sets, sets_for(2 * out_set_bytes + slot_set_bytes + cache_set_bytes,
                              settings_.rotation_bytes, settings_.max_sets));
  DeviceBuffer keys_out(unowned(rt), out_set_bytes * read_sets, "reader key outputs");
  DeviceBuffer values_out(unowned(rt), out_set_bytes * read_sets, "reader value outputs");
  ReadLaunch rl;
  rl.op = reader.get();
  rl.args.cache = view(DType::u8, {plan.num_blocks, static_cast<int64_t>(r.page_bytes)}, device);
  rl.args.slot_mapping = view(DType::i64, {T}, device);
  rl.args.key = view(DType::f32, {T, H, D}, device);
  rl.args.value = rl.args.key;
  rl.args.k_scale = options.cache.k_scale;
  rl.args.v_scale = options.cache.v_scale;
  rl.slots = bytes_of(slots);
  rl.caches = bytes_of(caches);
  rl.keys = bytes_of(keys_out);
  rl.values = bytes_of(values_out);
  rl.kv_set_bytes = out_set_bytes;
  rl.slot_set_bytes = slot_set_bytes;
  rl.cache_set_bytes = cache_set_bytes;
  rl.sets = read_sets;
  scrub_caches();
  r.read = time_launches(&ReadLaunch::launch, &rl, graph_allowed,
                         read_bytes(T, plan.valid_tokens, H, D, row), read_sets);
  r.read->bytes_all_rows = read_bytes(T, T, H, D, row);
}

}  // namespace kvq::app::bench
