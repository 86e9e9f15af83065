#pragma once
// The YAML config (configs/*.yaml, docs/config.md) parsed into typed structs. Every error names
// FILE:LINE:COL and the key; unknown keys are errors (a typo must never fall back to a default).
// Format-specific checks (is "sm100_swizzled" a scale arrangement? is head_size 80 allowed?) are
// the layouts library's; it throws kvq::Error with Error::key() set, and Config::fail_at() turns
// that into the same FILE:LINE:COL form.
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
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

struct KVQ_API Config {
  std::string backend = "auto";           // a plugin's name, or auto (highest available score)
  std::vector<std::string> plugin_paths;  // searched first; relative to the config's folder
  std::string device = "auto";            // auto | cpu | cuda:N (auto: the backend's default)
  int32_t threads = 0;                    // CPU worker threads, 0 = hardware concurrency
  static constexpr int32_t kMaxThreads = 4096;  // the most `threads` may ask for
  CacheSpec cache;
  LogSpec log;

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

// A top-level section that a program reads itself (kvq-demo's `demo:`), with the rules of the
// config's own keys: values typed and in range, unknown or repeated keys refused, every error at
// its FILE:LINE:COL, every value's mark in Config::marks ("demo.seed"). Handed to the program's
// ConfigSectionReader while the config is parsed, after the keys of Config itself.
class KVQ_API ConfigSection {
 public:
  struct Impl;  // the parser's own (io/src/config.cpp)
  explicit ConfigSection(const Impl& impl) noexcept : impl_(&impl) {}

  const std::string& name() const noexcept;
  // The config's own keys, parsed before any section (a section may be checked against the cache).
  const Config& config() const noexcept;

  // Refuses a key that is not one of `allowed`, or one given twice.
  void only_keys(const std::vector<std::string_view>& allowed) const;
  bool has(const std::string& key) const;
  // An integer in [lo, hi].
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  // [min, max]: two integers in [lo, hi], min <= max.
  std::array<int64_t, 2> range(const std::string& key, int64_t lo, int64_t hi) const;
  // Throws ConfigError "NAME.KEY: message" at KEY's value, or at the section when KEY is absent.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

 private:
  const Impl* impl_;
};

// A program's own top-level section: `read` is called when the config has a key `name` (a
// mapping); a config without it never calls it. Only the sections a load is given are accepted:
// for every other program the same key stays an unknown key.
struct ConfigSectionReader {
  std::string name;
  std::function<void(const ConfigSection&)> read;
};

// Parse and check types, ranges and core's own enum words, then the `sections` the program reads
// itself. Throws ConfigError (or kvq::Error with code io when the file cannot be read).
KVQ_API Config load_config(const std::filesystem::path& file,
                           const std::vector<ConfigSectionReader>& sections = {});
KVQ_API Config parse_config(std::string_view yaml, const std::string& source = "<string>",
                            const std::vector<ConfigSectionReader>& sections = {});

// The one grammar of numbers in kvq's configs (k_scale, v_scale) and in what kvq records in files
// (a cache file's k_scale and v_scale): a decimal as std::from_chars reads it -- an optional '-',
// digits with an optional fraction and exponent -- or one of YAML's .inf / .nan words. No '+',
// no spaces, no hexadecimal, nothing after the number: "0x1p3", "+2" and " 1.0" are refused, as
// in the config. std::nullopt for anything refused.
KVQ_API std::optional<double> parse_number(std::string_view text);

// Parses "cpu" / "cuda:N"; std::nullopt for anything else ("auto" included).
KVQ_API std::optional<Device> parse_device(std::string_view word);

}  // namespace kvq
