#include "demo_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attention.h"
#include "cache_content.h"
#include "gpu_attention.h"
#include "interrupt.h"
#include "kv_generator.h"
#include "kvq/core/logging.h"
#include "kvq/io/open_backend.h"
#include "kvq/layouts/layout_factory.h"
#include "progress.h"
#include "sequence_scheduler.h"
#include "sharded_cache.h"
#include "tensor_parallel.h"
#include "timeline.h"

namespace kvq::demo {

DemoSpec demo_spec(const Config& cfg, const RunOptions& options) {
  DemoSpec spec = options.section.value_or(DemoSpec{});
  if (options.seed) spec.seed = *options.seed;
  // A demo section was checked against the cache with the config; the default workload is here.
  if (const std::string problem = demo_fit_problem(spec, cfg.cache); !problem.empty()) {
    cfg.fail_at(options.section ? "demo.prompt_tokens" : "cache.num_blocks", problem);
  }
  return spec;
}

namespace {

// Host bytes the demo keeps for each cache block whatever the backend: the block allocator's free
// list (8) and in-use and ever-used flags (1 + 1), and the owner counts of the final leak check
// (8).
constexpr uint64_t kHostBytesPerBlock = 18;

struct HostMemory {
  uint64_t bytes = std::numeric_limits<uint64_t>::max();
  std::string source = "no limit known";
};

// a + b and a * b, saturated at 2^64 - 1 (a config's sizes may overflow 64 bits).
uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

// What a process may allocate here: the physical memory, or less where ulimit -v / -d says so.
HostMemory host_memory() {
  HostMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    m.bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    m.source = "this machine's physical memory";
  }
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "the address space limit (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "the data limit (ulimit -d)"}}) {
    rlimit r{};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < m.bytes) {
      m.bytes = r.rlim_cur;
      m.source = name;
    }
  }
  return m;
}

// A sequence's original K/V while it is in the cache: what was written, kept to compare with what
// the reader gives back.
struct Originals {
  std::vector<uint16_t> key, value;  // [total tokens, H, D] bf16 bits
};

class DemoRun {
 public:
  DemoRun(const Config& cfg, const RunOptions& options)
      : cfg_(cfg),
        options_(options),
        spec_(demo_spec(cfg, options)),
        heads_(cfg.cache.num_kv_heads),
        dim_(cfg.cache.head_size),
        row_(heads_ * dim_),
        generator_(spec_.seed, heads_, dim_) {}

  DemoResult run() {
    const auto start = std::chrono::steady_clock::now();
    const int64_t shards = options_.tensor_parallel;
    check_tensor_parallel(heads_, shards);
    if (!options_.devices.empty()) (void)shard_devices(shards, Device::cpu(), options_.devices);
    OpenedBackend opened = open_backend(cfg_, options_.backend);
    const int64_t max_write = std::max(spec_.prompt_tokens[1], spec_.max_batch);
    const int64_t max_read = spec_.prompt_tokens[1] + spec_.decode_tokens[1];
    // Before anything of the cache's size is allocated, on the host or the device.
    check_memory(opened, shards);
    // Devices from the config (not --devices): a device the backend refuses is the config's.
    if (options_.devices.empty()) {
      at_config_keys(cfg_, [&] { open_cache(opened, shards, max_write, max_read); });
    } else {
      open_cache(opened, shards, max_write, max_read);
    }
    open_gpu_attention(opened, max_read);
    if (options_.verify) {
      // The same shards on the CPU: shard by shard, the same pages.
      Backend reference = opened.registry.select("reference_cpu");
      BackendOptions o = opened.options;
      o.device = Device::cpu();
      reference_.emplace(reference, o, shards, max_write, max_read);
    }
    scheduler_.emplace(plan_sequences(spec_, spec_.seed), spec_.max_batch, cfg_.cache.num_blocks,
                       cfg_.cache.block_size);
    if (options_.timeline) timeline_.emplace(start);
    fill_header(opened);

    // The exact number of tokens the run will write, for the progress bar: the same schedule,
    // without data.
    const int64_t total = planned_tokens();
    Progress progress =
        options_.progress ? Progress(stderr, total) : Progress(stderr, total, Progress::Mode::off);

    std::vector<uint16_t> batch_key(static_cast<std::size_t>(spec_.max_batch * row_));
    std::vector<uint16_t> batch_value(batch_key.size());
    std::vector<float> fkey(static_cast<std::size_t>(row_)), fvalue(fkey.size());

    auto retire = [&] {
      for (int64_t id : scheduler_->complete()) {
        throw_if_interrupted();
        check_sequence(id);
        scheduler_->release(id);
        originals_.erase(id);
      }
    };

    while (!scheduler_->done()) {
      throw_if_interrupted();
      const std::vector<PrefillWrite> prefills = scheduler_->admit();
      for (const PrefillWrite& w : prefills) {
        throw_if_interrupted();
        const Sequence& s = scheduler_->sequence(w.sequence);
        Originals& o = originals_[w.sequence];
        const auto n = static_cast<std::size_t>(s.plan.total() * row_);
        o.key.resize(n);
        o.value.resize(n);
        const int64_t p = s.plan.prompt_tokens;
        std::vector<float> k(static_cast<std::size_t>(p * row_)), v(k.size());
        generator_.rows(w.sequence, 0, p, k.data(), v.data());
        for (std::size_t i = 0; i < k.size(); ++i) {
          o.key[i] = bf16_from_float(k[i]);
          o.value[i] = bf16_from_float(v[i]);
        }
        write(o.key.data(), o.value.data(), w.slots.data(), p, true);
        result_.tokens_written += p;
        ++result_.prefill_writes;
        progress.update(result_.tokens_written, "prefill");
      }
      retire();
      if (scheduler_->done()) break;
      if (!scheduler_->has_decode_work()) {
        if (prefills.empty()) {
          throw Error(ErrorCode::internal, "scheduler: nothing to admit and nothing to decode");
        }
        continue;
      }
      const DecodeWrite w = scheduler_->decode();
      std::fill(batch_key.begin(), batch_key.end(), uint16_t{0});
      std::fill(batch_value.begin(), batch_value.end(), uint16_t{0});
      for (std::size_t r = 0; r < w.sequence.size(); ++r) {
        if (w.sequence[r] < 0) continue;
        generator_.rows(w.sequence[r], w.position[r], 1, fkey.data(), fvalue.data());
        Originals& o = originals_.at(w.sequence[r]);
        const auto at = static_cast<std::size_t>(w.position[r] * row_);
        for (std::size_t i = 0; i < fkey.size(); ++i) {
          const uint16_t kb = bf16_from_float(fkey[i]), vb = bf16_from_float(fvalue[i]);
          o.key[at + i] = kb;
          o.value[at + i] = vb;
          batch_key[r * static_cast<std::size_t>(row_) + i] = kb;
          batch_value[r * static_cast<std::size_t>(row_) + i] = vb;
        }
      }
      write(batch_key.data(), batch_value.data(), w.slots.data(), spec_.max_batch, false);
      if (gpu_) attend_on_gpu(w, result_.decode_writes);
      result_.tokens_written += w.tokens;
      result_.padding_slots += spec_.max_batch - w.tokens;
      ++result_.decode_writes;
      progress.update(result_.tokens_written, "decode");
      retire();
    }
    progress.finish();
    if (result_.tokens_written != total) {
      throw Error(ErrorCode::internal, fmt::format("wrote {} tokens, the schedule planned {}",
                                                   result_.tokens_written, total));
    }

    // The snapshot at the end: sequences still running are read back in place.
    const std::vector<int64_t> live = scheduler_->running();
    for (int64_t id : live) {
      throw_if_interrupted();
      check_sequence(id);
    }
    result_.sequences_live_at_end = static_cast<int64_t>(live.size());
    result_.sequences_finished = scheduler_->num_finished();
    result_.blocks_leaked = scheduler_->blocks_leaked();
    if (const int64_t skipped = cache_->take_out_of_range_slots(); skipped != 0) {
      throw Error(ErrorCode::runtime,
                  fmt::format("the writer skipped {} out-of-range slots: the demo's slot "
                              "mappings are wrong",
                              skipped));
    }
    if (gpu_) finish_gpu_attention();
    if (reference_) verify();
    fill_shards();
    if (timeline_) result_.timeline = timeline_->result();
    finish_numbers(start);
    return result_;
  }

 private:
  // The cache in `shards` KV-head shards: on --devices, or counted up from the device the
  // backend resolves the config's to (one shard: exactly the config's device, as before).
  // The host memory the run needs, refused at cache.num_blocks (exit 2) when it is more than this
  // machine gives a process: the demo's per-block state, every shard cache that lives in host
  // memory (a CPU backend's), and with --verify the reference caches and the two copies compared.
  // A cache on a GPU is checked by its own allocation, before any per-block state exists
  // (ShardedCache refuses one that does not fit the device, at the same key).
  void check_memory(const OpenedBackend& opened, int64_t shards) {
    if (shards < 1 || heads_ % shards != 0) return;  // check_tensor_parallel said why
    const std::vector<Device> devices =
        options_.devices.empty()
            ? shard_devices(shards, opened.backend.make_runtime(opened.options)->device(), {})
            : options_.devices;
    CacheSpec shard_spec = cfg_.cache;
    shard_spec.num_kv_heads = heads_ / shards;
    const std::unique_ptr<PageLayout> layout = make_layout(shard_spec);
    const uint64_t shard_bytes = layout->cache_bytes();
    const auto blocks = static_cast<uint64_t>(cfg_.cache.num_blocks);
    const auto count = static_cast<uint64_t>(shards);
    uint64_t cache_on_host = 0;
    for (const Device& d : devices)
      cache_on_host = add_sat(cache_on_host, d.is_cuda() ? 0 : shard_bytes);
    const uint64_t verify = options_.verify ? mul_sat(shard_bytes, count + 2) : 0;
    const uint64_t state = mul_sat(blocks, kHostBytesPerBlock);
    const uint64_t total = add_sat(add_sat(cache_on_host, verify), state);
    const HostMemory host = host_memory();
    if (total < host.bytes) return;
    const auto shown = [](uint64_t v) {
      return v == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64")
                                                       : std::to_string(v);
    };
    cfg_.fail_at(
        "cache.num_blocks",
        fmt::format("{} blocks of {} bytes need {} bytes of host memory ({} for caches in host "
                    "memory{}, {} for the demo's per-block state at {} bytes a block): expected "
                    "at most {} bytes ({})",
                    blocks, mul_sat(layout->page_bytes(), count), shown(total),
                    shown(cache_on_host),
                    options_.verify ? ", " + shown(verify) + " for --verify" : std::string(),
                    shown(state), kHostBytesPerBlock, host.bytes, host.source));
  }

  void open_cache(const OpenedBackend& opened, int64_t shards, int64_t max_write,
                  int64_t max_read) {
    std::vector<Device> devices;
    if (shards > 1 || !options_.devices.empty()) {
      const Device first = options_.devices.empty()
                               ? opened.backend.make_runtime(opened.options)->device()
                               : Device::cpu();
      devices = shard_devices(shards, first, options_.devices);
    }
    try {
      cache_.emplace(opened.backend, opened.options, shards, max_write, max_read, devices);
    } catch (const Error& e) {
      const bool counted_up_on_gpus =
          options_.devices.empty() && shards > 1 && !devices.empty() && devices.front().is_cuda();
      if (!counted_up_on_gpus) throw;
      // "0,0": every shard on the first device
      const std::vector<int32_t> same(static_cast<std::size_t>(shards), devices.front().index);
      throw Error(e.code(),
                  fmt::format("{} (shards go on cuda:{}..cuda:{} by default; --devices places "
                              "them, e.g. --devices {} puts every shard on cuda:{})",
                              e.what(), devices.front().index, devices.back().index,
                              fmt::join(same, ","), devices.front().index),
                  e.key());
    }
  }

  // Decode attention on the GPU when the backend has attention and every shard is on a CUDA
  // device; otherwise the result says why not (the host attention of check_sequence runs in
  // every case). A cache or shape the backend's attention refuses (invalid_argument: a head_size
  // its kernels are not built for, more sequences than its grid takes) is such a reason too;
  // any other failure is the run's.
  void open_gpu_attention(const OpenedBackend& opened, int64_t max_read) {
    GpuAttentionResult& g = result_.gpu_attention;
    const std::string& name = opened.backend.info().name;
    if (!opened.backend.has_attention()) {
      g.reason = fmt::format("backend {} has no decode attention", name);
      return;
    }
    // The same words for any number of shards on the host (the JSON must not depend on it).
    int64_t on_gpus = 0;
    for (int64_t s = 0; s < cache_->num_shards(); ++s) on_gpus += cache_->device(s).is_cuda();
    for (int64_t s = 0; s < cache_->num_shards(); ++s) {
      const Device d = cache_->device(s);
      if (d.is_cuda()) continue;
      g.reason = on_gpus == 0 ? fmt::format("backend {} has no GPU attention (it runs on {})", name,
                                            to_string(d))
                              : fmt::format("shard {} is on {}, not on a GPU", s, to_string(d));
      return;
    }
    const int64_t max_blocks = (max_read + cfg_.cache.block_size - 1) / cfg_.cache.block_size;
    try {
      gpu_.emplace(opened.backend, opened.options, *cache_, spec_.query_heads_per_kv_head,
                   spec_.max_batch, max_blocks);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) throw;
      g.reason = fmt::format("backend {}'s attention refuses this run: {}", name, e.what());
      return;
    }
    g.ran = true;
    g.check_every = spec_.gpu_attention_check_every;
  }

  // After a decode step's write: the backend's attention over the sequences the step wrote, each
  // with a fresh query per query head at the position of the token it just wrote, timed; on the
  // checked steps (demo.gpu_attention_check_every) its output against f32 attention on the
  // original rows of the same tokens.
  void attend_on_gpu(const DecodeWrite& w, int64_t step) {
    step_sequences_.clear();
    for (std::size_t r = 0; r < w.sequence.size(); ++r) {
      if (w.sequence[r] < 0) continue;
      const Sequence& s = scheduler_->sequence(w.sequence[r]);
      if (s.length != w.position[r] + 1) {
        throw Error(ErrorCode::internal,
                    fmt::format("sequence {} holds {} tokens after writing position {}", s.id,
                                s.length, w.position[r]));
      }
      step_sequences_.push_back(&s);
    }
    if (step_sequences_.empty()) return;
    const StepTables tables = build_step_tables(step_sequences_, cfg_.cache.block_size);
    const int64_t group = spec_.query_heads_per_kv_head;
    const auto q_row = static_cast<std::size_t>(heads_ * group * dim_);
    const std::size_t n = step_sequences_.size();
    step_query_.resize(n * q_row);
    step_query_bf16_.resize(n * q_row);
    for (std::size_t i = 0; i < n; ++i) {
      const Sequence& s = *step_sequences_[i];
      generator_.queries(s.id, s.length - 1, group, step_query_.data() + i * q_row);
    }
    // The kernel takes a bf16 query; the reference attends with the same values.
    for (std::size_t i = 0; i < step_query_.size(); ++i) {
      step_query_bf16_[i] = bf16_from_float(step_query_[i]);
      step_query_[i] = bf16_to_float(step_query_bf16_[i]);
    }

    GpuAttentionResult& g = result_.gpu_attention;
    const double seconds = gpu_->attend(step_query_bf16_.data(), tables);
    gpu_step_seconds_.push_back(seconds);
    g.seconds += seconds;
    g.bytes += gpu_->bytes(tables);
    ++g.steps;
    g.calls += gpu_->num_shards();
    if (!is_checked_step(step, spec_.gpu_attention_check_every)) return;

    step_output_.resize(n * q_row);
    gpu_->output(step_output_.data());
    out_ref_.resize(q_row);
    for (std::size_t i = 0; i < n; ++i) {
      throw_if_interrupted();
      const Sequence& s = *step_sequences_[i];
      const Originals& o = originals_.at(s.id);
      const auto e = static_cast<std::size_t>(s.length * row_);
      orig_key_.resize(e);
      orig_value_.resize(e);
      for (std::size_t k = 0; k < e; ++k) {
        orig_key_[k] = bf16_to_float(o.key[k]);
        orig_value_[k] = bf16_to_float(o.value[k]);
      }
      gqa_decode_attention(AttentionShape{s.length, heads_, dim_, group},
                           step_query_.data() + i * q_row, orig_key_.data(), orig_value_.data(),
                           out_ref_.data());
      gpu_stats_.add(out_ref_.data(), step_output_.data() + i * q_row, static_cast<int64_t>(q_row));
    }
    ++g.checked_steps;
    g.checked_queries += static_cast<int64_t>(n) * heads_ * group;
  }

  // The GPU attention's numbers; its device-side tables must all have been in range.
  void finish_gpu_attention() {
    const AttentionOutOfRange skipped = gpu_->take_out_of_range();
    if (skipped.block_ids != 0 || skipped.seq_lens != 0 || skipped.scales != 0) {
      throw Error(ErrorCode::runtime,
                  fmt::format("GPU attention skipped {} block ids outside the cache, {} "
                              "seq_lens past the block table and {} unusable scales: the "
                              "demo's inputs are wrong",
                              skipped.block_ids, skipped.seq_lens, skipped.scales));
    }
    GpuAttentionResult& g = result_.gpu_attention;
    g.us_per_step_median = median(gpu_step_seconds_) * 1e6;
    g.gb_per_s = g.seconds > 0 ? static_cast<double>(g.bytes) / g.seconds / 1e9 : 0.0;
    g.rel_error = gpu_stats_.rel_l2();
    g.cosine = gpu_stats_.cosine();
  }

  void write(const uint16_t* key, const uint16_t* value, const int64_t* slots, int64_t tokens,
             bool prefill) {
    result_.write_seconds +=
        cache_->write(key, value, slots, tokens, timeline_ ? &times_ : nullptr);
    if (timeline_) timeline_->add(tokens, prefill, times_);
    if (reference_) reference_->write(key, value, slots, tokens);
  }

  // Per shard: where it ran, its pages and bytes, and each head's content hash; the cache hash
  // over all heads in order.
  void fill_shards() {
    const int64_t pages_used = scheduler_->allocator().peak_used();
    uint64_t cache_hash = kFnv1a64Offset;
    std::vector<uint8_t> content;
    for (int64_t s = 0; s < cache_->num_shards(); ++s) {
      ShardResult sh;
      sh.device = to_string(cache_->device(s));
      sh.device_name = cache_->device_name(s);
      sh.head_begin = cache_->head_begin(s);
      sh.num_heads = cache_->num_heads(s);
      const PageLayout& layout = cache_->layout(s);
      sh.page_bytes = layout.page_bytes();
      sh.pages_used = pages_used;
      sh.bytes_used = static_cast<uint64_t>(pages_used) * sh.page_bytes;
      sh.cache_bytes = layout.cache_bytes();
      const std::vector<uint8_t> bytes = cache_->cache_bytes(s);
      for (int64_t h = 0; h < sh.num_heads; ++h) {
        throw_if_interrupted();
        content.clear();
        append_head_content(layout, bytes.data(), h, content);
        sh.head_hashes.push_back(fnv1a64(content.data(), content.size()));
        cache_hash = fnv1a64(content.data(), content.size(), cache_hash);
      }
      result_.shards.push_back(std::move(sh));
    }
    result_.cache_hash = cache_hash;
  }

  int64_t planned_tokens() const {
    SequenceScheduler dry = *scheduler_;
    int64_t tokens = 0;
    while (!dry.done()) {
      throw_if_interrupted();
      const auto prefills = dry.admit();
      for (const PrefillWrite& w : prefills) tokens += static_cast<int64_t>(w.slots.size());
      for (int64_t id : dry.complete()) dry.release(id);
      if (dry.done()) break;
      if (!dry.has_decode_work()) {
        if (prefills.empty()) break;  // run() reports it
        continue;
      }
      tokens += dry.decode().tokens;
      for (int64_t id : dry.complete()) dry.release(id);
    }
    return tokens;
  }

  // Reads a sequence's K/V back through the backend's reader, adds the K and V errors, and runs
  // decode attention for a fresh query per query head on the dequantized and the original K/V.
  void check_sequence(int64_t id) {
    const Sequence& s = scheduler_->sequence(id);
    const Originals& o = originals_.at(id);
    const int64_t t = s.length;
    const auto n = static_cast<std::size_t>(t * row_);
    const std::vector<int64_t> slots = scheduler_->slots_of(id);
    read_key_.resize(n);
    read_value_.resize(n);
    cache_->read(slots.data(), t, read_key_.data(), read_value_.data());
    orig_key_.resize(n);
    orig_value_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      orig_key_[i] = bf16_to_float(o.key[i]);
      orig_value_[i] = bf16_to_float(o.value[i]);
    }
    k_stats_.add(orig_key_.data(), read_key_.data(), static_cast<int64_t>(n));
    v_stats_.add(orig_value_.data(), read_value_.data(), static_cast<int64_t>(n));

    const int64_t group = spec_.query_heads_per_kv_head;
    const auto qn = static_cast<std::size_t>(heads_ * group * dim_);
    query_.resize(qn);
    out_ref_.resize(qn);
    out_test_.resize(qn);
    generator_.queries(id, t, group, query_.data());
    const AttentionShape shape{t, heads_, dim_, group};
    gqa_decode_attention(shape, query_.data(), orig_key_.data(), orig_value_.data(),
                         out_ref_.data());
    gqa_decode_attention(shape, query_.data(), read_key_.data(), read_value_.data(),
                         out_test_.data());
    attention_stats_.add(out_ref_.data(), out_test_.data(), static_cast<int64_t>(qn));
    result_.attention_queries += heads_ * group;
  }

  void verify() {
    VerifyResult v;
    v.reference = "reference_cpu";
    for (int64_t shard = 0; shard < cache_->num_shards(); ++shard) {
      const std::vector<uint8_t> mine = cache_->cache_bytes(shard);
      const std::vector<uint8_t> ref = reference_->cache_bytes(shard);
      if (mine.size() != ref.size()) {
        throw Error(ErrorCode::internal,
                    fmt::format("--verify: the caches differ in size: {} vs {} bytes", mine.size(),
                                ref.size()));
      }
      for (std::size_t i = 0; i < mine.size(); ++i) {
        if (mine[i] != ref[i]) {
          if (v.first_difference < 0) {
            v.first_difference = static_cast<int64_t>(v.bytes_compared + i);
          }
          ++v.differing_bytes;
        }
      }
      v.bytes_compared += mine.size();
    }
    result_.verify = v;
  }

  void fill_header(const OpenedBackend& opened) {
    DemoResult& r = result_;
    r.backend = opened.backend.info().name;
    r.backend_version = opened.backend.info().version;
    r.device = cache_->device_name();
    r.format = cfg_.cache.format;
    r.order = cfg_.cache.layout.order;
    const CacheSpec resolved = PageLayout::resolved(cfg_.cache);
    r.k_scales = resolved.layout.k_scales;
    r.v_scales = resolved.layout.v_scales;
    r.num_kv_heads = heads_;
    r.head_size = dim_;
    r.block_size = cfg_.cache.block_size;
    r.k_scale = cfg_.cache.k_scale;
    r.v_scale = cfg_.cache.v_scale;
    r.page_bytes = cache_->page_bytes();
    r.pages_total = cfg_.cache.num_blocks;
    r.seed = spec_.seed;
    r.sequences = spec_.sequences;
    r.max_batch = spec_.max_batch;
    r.query_heads_per_kv_head = spec_.query_heads_per_kv_head;
    r.prompt_min = spec_.prompt_tokens[0];
    r.prompt_max = spec_.prompt_tokens[1];
    r.decode_min = spec_.decode_tokens[0];
    r.decode_max = spec_.decode_tokens[1];
    r.bytes_per_token = static_cast<double>(r.page_bytes) / static_cast<double>(r.block_size);
    r.bytes_per_token_bf16 = static_cast<double>(2 * heads_ * dim_ * 2);
    r.compression_vs_bf16 = r.bytes_per_token_bf16 / r.bytes_per_token;
  }

  void finish_numbers(std::chrono::steady_clock::time_point start) {
    DemoResult& r = result_;
    const BlockAllocator& a = scheduler_->allocator();
    r.pages_used = a.peak_used();
    r.pages_distinct = a.distinct_used();
    r.pages_reused = a.reused();
    r.pages_in_use_at_end = a.num_used();
    r.k_rel_error = k_stats_.rel_l2();
    r.v_rel_error = v_stats_.rel_l2();
    r.attention_rel_error = attention_stats_.rel_l2();
    r.attention_cosine = attention_stats_.cosine();
    const double input_bytes =
        static_cast<double>(r.tokens_written) * static_cast<double>(2 * row_ * 2);
    r.write_tokens_per_s =
        r.write_seconds > 0 ? static_cast<double>(r.tokens_written) / r.write_seconds : 0.0;
    r.write_gb_per_s = r.write_seconds > 0 ? input_bytes / r.write_seconds / 1e9 : 0.0;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  const Config& cfg_;
  RunOptions options_;
  DemoSpec spec_;
  int64_t heads_, dim_, row_;
  KvGenerator generator_;
  // Made once every size the config implies is known to fit (check_memory, open_cache): its
  // per-block state alone is 18 bytes a block.
  std::optional<SequenceScheduler> scheduler_;
  std::optional<ShardedCache> cache_;
  std::optional<ShardedCache> reference_;
  std::optional<GpuAttention> gpu_;  // when the attention runs on the GPU (open_gpu_attention)
  std::optional<TimelineRecorder> timeline_;
  std::vector<ShardWriteTimes> times_;
  std::map<int64_t, Originals> originals_;
  ErrorStats k_stats_, v_stats_, attention_stats_, gpu_stats_;
  std::vector<double> gpu_step_seconds_;
  DemoResult result_;
  // Scratch reused across sequences.
  std::vector<float> read_key_, read_value_, orig_key_, orig_value_, query_, out_ref_, out_test_;
  std::vector<const Sequence*> step_sequences_;
  std::vector<float> step_query_, step_output_;
  std::vector<uint16_t> step_query_bf16_;
};

}  // namespace

DemoResult run_demo(const Config& cfg, const RunOptions& options) {
  return DemoRun(cfg, options).run();
}

}  // namespace kvq::demo
