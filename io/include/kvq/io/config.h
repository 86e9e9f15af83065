#pragma once
// The YAML config (configs/*.yaml, docs/config.md) parsed into typed structs. Every error names
// FILE:LINE:COL and the key; unknown keys are errors (a typo must never fall back to a default).
// Format-specific checks (is "sm100_swizzled" a scale arrangement? is head_size 80 allowed?) are
// the layouts library's; it throws kvq::Error with Error::key() set, and Config::fail_at() turns
// that into the same FILE:LINE:COL form.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/cache_spec.h"
#include "kvq/core/export.h"
#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

struct Mark {
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based
};

struct LogSpec {
  std::string level = "info";  // trace | debug | info | warn | error | off
};

// `demo:` -- the decode demo's workload (apps/kvq-demo). Ranges are [min, max], inclusive.
struct DemoSpec {
  int64_t sequences = 12;  // sequences run in all
  int64_t max_batch = 4;   // live at once; new ones are admitted into freed blocks
  std::array<int64_t, 2> prompt_tokens{64, 512};
  std::array<int64_t, 2> decode_tokens{16, 96};
  int64_t query_heads_per_kv_head = 4;  // GQA group size
  uint64_t seed = 1234;
};

// Empty when the longest sequence `demo` allows (prompt_tokens max + decode_tokens max) fits in
// `cache`'s blocks, else what does not fit: a sequence's pages stay in the cache until it ends.
KVQ_API std::string demo_fit_problem(const DemoSpec& demo, const CacheSpec& cache);

struct KVQ_API Config {
  std::string backend = "auto";           // a plugin's name, or auto (highest available score)
  std::vector<std::string> plugin_paths;  // searched first; relative to the config's folder
  std::string device = "auto";            // auto | cpu | cuda:N (auto: the backend's default)
  int32_t threads = 0;                    // CPU worker threads, 0 = hardware concurrency
  static constexpr int32_t kMaxThreads = 4096;  // the most `threads` may ask for
  CacheSpec cache;
  LogSpec log;
  std::optional<DemoSpec> demo;

  std::string source = "<string>";    // the file it came from, as given
  std::map<std::string, Mark> marks;  // dotted key ("cache.head_size") -> where its value is

  // Throws ConfigError "SOURCE:LINE:COL: key: message" at the mark of `key`, or of its nearest
  // marked parent ("cache.layout.v_scales" -> "cache.layout" -> "cache").
  [[noreturn]] void fail_at(const std::string& key, const std::string& message) const;

  // The folder relative plugin_paths are resolved against.
  std::filesystem::path base_dir() const;
};

class KVQ_API ConfigError : public Error {
 public:
  ConfigError(const std::string& source, Mark mark, const std::string& key,
              const std::string& message);
  const std::string& source() const noexcept { return source_; }
  Mark mark() const noexcept { return mark_; }

 private:
  std::string source_;
  Mark mark_;
};

// Parse and check types, ranges and core's own enum words. Throws ConfigError (or kvq::Error with
// code io when the file cannot be read).
KVQ_API Config load_config(const std::filesystem::path& file);
KVQ_API Config parse_config(std::string_view yaml, const std::string& source = "<string>");

// The one grammar of numbers in kvq's configs (k_scale, v_scale) and in what kvq records in files
// (a cache file's k_scale and v_scale): a decimal as std::from_chars reads it -- an optional '-',
// digits with an optional fraction and exponent -- or one of YAML's .inf / .nan words. No '+',
// no spaces, no hexadecimal, nothing after the number: "0x1p3", "+2" and " 1.0" are refused, as
// in the config. std::nullopt for anything refused.
KVQ_API std::optional<double> parse_number(std::string_view text);

// Parses "cpu" / "cuda:N"; std::nullopt for anything else ("auto" included).
KVQ_API std::optional<Device> parse_device(std::string_view word);

}  // namespace kvq
