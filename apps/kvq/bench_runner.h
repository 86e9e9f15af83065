#pragma once
// Runs one bench case: allocates rotated input sets on the backend's device, times the writer
// (direct launches, and CUDA-graph replays for small T) and then the reader, through the
// backend's DeviceRuntime. Knows nothing of plugins: a Target is three factories and a runtime,
// so unit tests can drive it with fakes.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bench_plan.h"
#include "bench_stats.h"
#include "kvq/core/device_buffer.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/registry.h"

namespace kvq::app::bench {

struct Target {
  DeviceRuntime* runtime = nullptr;
  std::function<std::shared_ptr<KVCacheWriter>(const BackendOptions&)> make_writer;
  std::function<std::shared_ptr<KVCacheReader>(const BackendOptions&)> make_reader;  // optional
  BackendOptions base;  // layout words, scales and device from the config; geometry is per case
};

struct Settings {
  int32_t iterations = 50;  // timed runs per timing (--iterations), on every backend
  int32_t warmup = 3;
  uint64_t rotation_bytes = uint64_t{256} << 20;  // sets rotated add up to at least this
  int64_t max_sets = 1024;  // more than the launches of one case: every launch gets fresh data
  // Graph replays are timed for T up to this: every size, because on a machine whose launch
  // costs more host time than a mid-size write takes on the GPU, only a graph shows the write.
  int64_t graph_max_tokens = int64_t{1} << 20;
  int32_t graph_launches = 16;  // writes per captured graph (an engine's decode step: one a layer)
  uint64_t seed = 0x6b7671;
  // Set (--fused-qkv Q): K and V are views of one fused QKV projection's output, as engines pass
  // them: [T, (Q + 2H) x D] with K's heads after the Q query heads and V's after K's, so a
  // token's K and V rows sit (Q + 2H) x D elements apart. Unset: two contiguous [T, H, D].
  std::optional<int64_t> fused_qkv_query_heads;
};

struct Measurement {
  ByteCounts bytes;  // the least a launch must move: the valid tokens' rows
  // Issue 7's formula, every token's rows counted (padding included): 5.2% more at 5% padding.
  // The JSON gives the percentages by both; the table and the verdicts use `bytes`.
  ByteCounts bytes_all_rows;
  int64_t sets = 0;  // input sets rotated
  TimingSummary direct;
  std::optional<TimingSummary> graph;
  std::string graph_note;  // why there is no graph timing
  // A device-to-device copy moving the same bytes (bytes.total() / 2 copied), timed the same
  // way in the same run: what any kernel of this size reaches, ramp and drain included.
  double same_size_copy_bps = 0;
};

struct CaseResult {
  Case c;
  int64_t valid_tokens = 0;
  int64_t padding_tokens = 0;
  int64_t num_blocks = 0;
  uint64_t page_bytes = 0;
  std::optional<Measurement> write;
  std::optional<Measurement> read;
  std::string error;  // non-empty when the case failed (the other fields say how far it got)
};

class CaseRunner {
 public:
  // Allocates the cache scrub buffer (settings.rotation_bytes) on the runtime's device. Throws.
  CaseRunner(Target target, Settings settings);
  CaseRunner(const CaseRunner&) = delete;
  CaseRunner& operator=(const CaseRunner&) = delete;

  // Never throws for a failing case: the error is in the result.
  CaseResult run(const Case& c);

 private:
  void run_or_throw(const Case& c, CaseResult& r);
  Measurement time_launches(LaunchFn launch, void* context, bool graph_allowed,
                            const ByteCounts& bytes, int64_t sets);
  void scrub_caches();  // overwrites settings.rotation_bytes so that no input stays cached

  Target target_;
  Settings settings_;
  DeviceBuffer scrub_;
};

}  // namespace kvq::app::bench
