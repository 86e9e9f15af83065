#include "bench_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <ostream>
#include <random>

#include "bench_stats.h"
#include "kvq/core/attention.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/page_layout.h"

namespace kvq::app::bench {
namespace {

class Buffer {
 public:
  Buffer(DeviceRuntime& rt, uint64_t bytes, const char* what) : rt_(&rt) {
    if (Status s = rt.allocate(std::max<uint64_t>(bytes, 1), &ptr_); !s) {
      throw Error(s.code(), fmt::format("allocating {} ({} bytes): {}", what, bytes, s.message()));
    }
  }
  ~Buffer() {
    if (ptr_ != nullptr) (void)rt_->release(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }

 private:
  DeviceRuntime* rt_;
  void* ptr_ = nullptr;
};

struct Launch {
  KVCacheAttention* attention;
  AttentionArgs args;
  static Status launch(void* c, void* stream) noexcept {
    auto* l = static_cast<Launch*>(c);
    AttentionArgs a = l->args;
    a.stream = stream;
    return l->attention->attend(a);
  }
};

void run_case(const Backend& backend, const BackendOptions& base, const AttentionSweep& sweep,
              DeviceRuntime& rt, AttentionCaseResult& r) {
  const int64_t H = sweep.num_kv_heads, D = sweep.head_size, T = sweep.block_size;
  const int64_t S = r.num_seqs, Hq = H * r.group;
  const int64_t blocks_per_seq = (r.context + T - 1) / T;
  BackendOptions o = base;
  o.cache.format = r.format;
  o.cache.num_kv_heads = H;
  o.cache.head_size = D;
  o.cache.block_size = T;
  o.cache.num_blocks = S * blocks_per_seq;
  if (r.format != "nvfp4") o.cache.layout.k_scales = o.cache.layout.v_scales = "";
  o.cache.k_scale = o.cache.v_scale = 1.0f;
  const PageLayout layout = PageLayout::from_spec(o.cache);
  r.cache_bytes = layout.cache_bytes();
  if (r.cache_bytes > sweep.max_cache_bytes) {
    r.skipped = fmt::format("cache of {:.1f} GiB above the {:.1f} GiB limit",
                            static_cast<double>(r.cache_bytes) / 1073741824.0,
                            static_cast<double>(sweep.max_cache_bytes) / 1073741824.0);
    return;
  }
  const auto side_row =
      static_cast<uint64_t>(layout.descriptor().row_bytes + layout.descriptor().groups);
  const uint64_t elements = static_cast<uint64_t>(S * Hq * D);
  r.bytes = static_cast<uint64_t>(S) * static_cast<uint64_t>(r.context) * static_cast<uint64_t>(H) *
                2 * side_row +
            static_cast<uint64_t>(S * blocks_per_seq) * 4 + static_cast<uint64_t>(S) * 4 +
            elements * 2 * 2;

  auto attention = backend.make_attention(o);
  uint64_t ws = 0;
  throw_if_error(attention->workspace_bytes(S, Hq, blocks_per_seq, &ws));
  Buffer cache(rt, r.cache_bytes, "the cache");
  Buffer query(rt, elements * 2, "the query");
  Buffer output(rt, elements * 2, "the output");
  Buffer tables(rt, static_cast<uint64_t>(S * blocks_per_seq) * 4, "block_tables");
  Buffer lens(rt, static_cast<uint64_t>(S) * 4, "seq_lens");
  Buffer workspace(rt, ws, "the workspace");
  // Values do not change the time: a constant byte (small finite numbers in every format).
  throw_if_error(rt.fill(cache.get(), 0x22, r.cache_bytes));
  throw_if_error(rt.fill(query.get(), 0x3C, elements * 2));
  std::vector<int32_t> table(static_cast<size_t>(S * blocks_per_seq));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(0x6b7671 + static_cast<uint64_t>(S)));
  std::vector<int32_t> seq_lens(static_cast<size_t>(S), static_cast<int32_t>(r.context));
  throw_if_error(rt.copy(tables.get(), table.data(), table.size() * 4, CopyKind::host_to_device));
  throw_if_error(
      rt.copy(lens.get(), seq_lens.data(), seq_lens.size() * 4, CopyKind::host_to_device));
  throw_if_error(rt.synchronize());

  const Device dev = rt.device();
  Launch l{attention.get(), {}};
  l.args.query = make_view(query.get(), DType::bf16, {S, Hq, D}, dev);
  l.args.block_tables = make_view(tables.get(), DType::i32, {S, blocks_per_seq}, dev);
  l.args.seq_lens = make_view(lens.get(), DType::i32, {S}, dev);
  l.args.cache = cache_view(layout, cache.get(), dev);
  l.args.output = make_view(output.get(), DType::bf16, {S, Hq, D}, dev);
  if (ws > 0)
    l.args.workspace = make_view(workspace.get(), DType::u8, {static_cast<int64_t>(ws)}, dev);

  std::vector<double> ms;
  throw_if_error(
      rt.time(&Launch::launch, &l, TimingOptions{sweep.warmup, sweep.iterations, false}, &ms));
  r.direct_us = summarize(ms).median_ms * 1000.0;
  std::vector<double> graph_ms;
  const Status g =
      rt.time(&Launch::launch, &l,
              TimingOptions{sweep.warmup, sweep.iterations, true, sweep.graph_launches}, &graph_ms);
  if (g) r.graph_us = summarize(graph_ms).median_ms * 1000.0;
  throw_if_error(
      rt.copy_bandwidth(std::clamp<uint64_t>(r.bytes / 2, 1, uint64_t{1} << 30), &r.copy_bps));
  AttentionOutOfRange skipped;
  throw_if_error(attention->take_out_of_range(&skipped));
}

double best_us(const AttentionCaseResult& r) {
  return r.graph_us > 0 ? r.graph_us : r.direct_us;
}

}  // namespace

std::vector<AttentionCaseResult> run_attention_sweep(const Backend& backend,
                                                     const BackendOptions& base,
                                                     const AttentionSweep& sweep,
                                                     std::ostream& progress) {
  const std::shared_ptr<DeviceRuntime> rt = backend.make_runtime(base);
  std::vector<AttentionCaseResult> out;
  for (int64_t group : sweep.groups) {
    for (int64_t seqs : sweep.num_seqs) {
      for (int64_t context : sweep.contexts) {
        for (const std::string& format : sweep.formats) {
          AttentionCaseResult r;
          r.format = format;
          r.group = group;
          r.num_seqs = seqs;
          r.context = context;
          try {
            run_case(backend, base, sweep, *rt, r);
          } catch (const std::exception& e) {
            r.error = e.what();
          }
          progress << fmt::format("attention {} G={} {}x{}: {}\n", format, group, seqs, context,
                                  !r.error.empty()     ? "failed: " + r.error
                                  : !r.skipped.empty() ? "skipped: " + r.skipped
                                                       : fmt::format("{:.1f} us", best_us(r)))
                   << std::flush;
          out.push_back(r);
        }
      }
    }
  }
  return out;
}

void print_attention_table(std::ostream& out, const std::vector<AttentionCaseResult>& results,
                           double copy_bps) {
  out << fmt::format(
      "decode attention, copy bandwidth {:.0f} GB/s (time: graph replay median; "
      "GB/s of the bytes it must move; % of a same-size copy)\n",
      copy_bps / 1e9);
  std::vector<std::string> formats;
  for (const auto& r : results) {
    if (std::find(formats.begin(), formats.end(), r.format) == formats.end()) {
      formats.push_back(r.format);
    }
  }
  out << fmt::format("{:>3} {:>5} {:>7}", "G", "seqs", "context");
  for (const auto& f : formats) out << fmt::format(" | {:>27}", f);
  out << "\n";
  for (size_t i = 0; i < results.size(); i += formats.size()) {
    const AttentionCaseResult& first = results[i];
    out << fmt::format("{:>3} {:>5} {:>7}", first.group, first.num_seqs, first.context);
    for (size_t k = 0; k < formats.size() && i + k < results.size(); ++k) {
      const AttentionCaseResult& r = results[i + k];
      if (!r.error.empty()) {
        out << fmt::format(" | {:>27}", "failed");
      } else if (!r.skipped.empty()) {
        out << fmt::format(" | {:>27}", "skipped (memory)");
      } else {
        const double gbps = gigabytes_per_second(r.bytes, best_us(r) / 1000.0);
        out << fmt::format(" | {:>9.1f} us {:>6.0f} GB/s {:>3.0f}%", best_us(r), gbps,
                           r.copy_bps > 0 ? 100.0 * gbps * 1e9 / r.copy_bps : 0.0);
      }
    }
    out << "\n";
  }
  for (const auto& r : results) {
    if (!r.error.empty()) {
      out << fmt::format("{} G={} {}x{} failed: {}\n", r.format, r.group, r.num_seqs, r.context,
                         r.error);
    }
  }
}

nlohmann::json attention_json(const std::vector<AttentionCaseResult>& results,
                              const AttentionSweep& sweep, const std::string& device,
                              double copy_bps) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json c = {{"format", r.format},           {"group", r.group},
                        {"num_seqs", r.num_seqs},       {"context", r.context},
                        {"cache_bytes", r.cache_bytes}, {"bytes", r.bytes}};
    if (!r.error.empty()) c["error"] = r.error;
    if (!r.skipped.empty()) c["skipped"] = r.skipped;
    if (r.error.empty() && r.skipped.empty()) {
      c["direct_us"] = r.direct_us;
      if (r.graph_us > 0) c["graph_us"] = r.graph_us;
      const double gbps = gigabytes_per_second(r.bytes, best_us(r) / 1000.0);
      c["gbps"] = gbps;
      c["same_size_copy_gbps"] = r.copy_bps / 1e9;
      c["percent_of_copy"] = r.copy_bps > 0 ? 100.0 * gbps * 1e9 / r.copy_bps : 0.0;
    }
    cases.push_back(c);
  }
  return {{"kind", "attention"},
          {"device", device},
          {"copy_gbps", copy_bps / 1e9},
          {"num_kv_heads", sweep.num_kv_heads},
          {"head_size", sweep.head_size},
          {"block_size", sweep.block_size},
          {"iterations", sweep.iterations},
          {"graph_launches", sweep.graph_launches},
          {"cases", cases}};
}

}  // namespace kvq::app::bench
