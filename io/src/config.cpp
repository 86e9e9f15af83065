#include "kvq/io/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <system_error>

#include "kvq/core/logging.h"
#include "kvq/core/status.h"

namespace kvq {

ConfigError::ConfigError(const std::string& source, Mark mark, const std::string& key,
                         const std::string& message)
    : Error(ErrorCode::invalid_argument,
            fmt::format("{}:{}:{}: {}{}", source, mark.line, mark.column,
                        key.empty() ? "" : key + ": ", message),
            key),
      source_(source),
      mark_(mark) {}

void Config::fail_at(const std::string& key, const std::string& message) const {
  std::string k = key;
  while (!k.empty()) {
    if (auto it = marks.find(k); it != marks.end())
      throw ConfigError(source, it->second, key, message);
    auto dot = k.rfind('.');
    k = dot == std::string::npos ? std::string() : k.substr(0, dot);
  }
  throw ConfigError(source, Mark{1, 1}, key, message);
}

std::filesystem::path Config::base_dir() const {
  if (source.empty() || source.front() == '<') return std::filesystem::current_path();
  return std::filesystem::absolute(std::filesystem::path(source)).parent_path();
}

std::optional<double> parse_number(std::string_view s) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN" || s == "nan" || s == "NaN") return std::nan("");
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "inf") {
    return std::numeric_limits<double>::infinity();
  }
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF" || s == "-inf") {
    return -std::numeric_limits<double>::infinity();
  }
  // from_chars also takes "infinity", "nan(...)" and any case of them: only digits are read here.
  const auto digit_or_point = [](char c) { return (c >= '0' && c <= '9') || c == '.'; };
  const std::size_t first = !s.empty() && s.front() == '-' ? 1 : 0;
  if (s.size() <= first || !digit_or_point(s[first])) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<Device> parse_device(std::string_view word) {
  if (word == "cpu") return Device::cpu();
  if (word.starts_with("cuda:")) {
    auto digits = word.substr(5);
    int32_t index = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return Device::cuda(index);
    }
  }
  return std::nullopt;
}

namespace {

Mark raw_mark(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return {1, 1};
  return {m.line + 1, m.column + 1};
}

std::string found(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return fmt::format("'{}'", message_text(n.Scalar()));
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Undefined: return "nothing";
  }
  return "?";
}

// Config's own top-level keys; a program's sections come after them.
constexpr std::string_view kConfigKeys[] = {"backend", "plugin_paths", "device",
                                            "threads", "cache",        "log"};

class Parser;

}  // namespace

// A section being read: the parser (its typed reads and marks), the section's node and name.
struct ConfigSection::Impl {
  Parser& parser;
  YAML::Node node;
  std::string name;

  std::string key(const std::string& k) const { return name + "." + k; }
};

namespace {

// Walks the YAML tree, filling a Config and recording where every value was.
class Parser {
 public:
  Parser(Config& cfg, const std::vector<ConfigSectionReader>& sections)
      : cfg_(cfg), sections_(sections) {}

  void parse_root(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull())
      fail(root, "", "the config is empty: expected a mapping with a 'cache:' section");
    expect_map(root, "");
    std::vector<std::string_view> keys(std::begin(kConfigKeys), std::end(kConfigKeys));
    for (const ConfigSectionReader& s : sections_) keys.push_back(s.name);
    only_keys(root, "", keys);
    if (auto n = root["backend"]) cfg_.backend = name_word(n, "backend");
    if (auto n = root["plugin_paths"]) cfg_.plugin_paths = string_list(n, "plugin_paths");
    if (auto n = root["device"]) {
      cfg_.device = scalar(n, "device", "auto, cpu or cuda:N");
      if (cfg_.device != "auto" && !parse_device(cfg_.device)) {
        fail(n, "device", fmt::format("expected auto, cpu or cuda:N, found {}", found(n)));
      }
    }
    if (auto n = root["threads"]) {
      cfg_.threads = static_cast<int32_t>(integer(n, "threads", 0, Config::kMaxThreads));
    }
    auto cache = root["cache"];
    if (!cache) fail(root, "cache", "missing required section 'cache'");
    parse_cache(cache);
    if (auto n = root["log"]) parse_log(n);
    for (const ConfigSectionReader& s : sections_) {
      if (auto n = root[s.name]) {
        expect_map(n, s.name);
        const ConfigSection::Impl impl{*this, n, s.name};
        s.read(ConfigSection(impl));
      }
    }
  }

  const Config& config() const { return cfg_; }

 private:
  void parse_cache(const YAML::Node& n) {
    expect_map(n, "cache");
    only_keys(n, "cache",
              {"format", "num_blocks", "block_size", "num_kv_heads", "head_size", "layout",
               "k_scale", "v_scale"});
    CacheSpec& c = cfg_.cache;
    c.format = name_word(required(n, "cache", "format"), "cache.format");
    constexpr int64_t kMax = int64_t{1} << 40;
    c.num_blocks = integer(required(n, "cache", "num_blocks"), "cache.num_blocks", 1, kMax);
    c.block_size = integer(required(n, "cache", "block_size"), "cache.block_size", 1, 1 << 20);
    c.num_kv_heads =
        integer(required(n, "cache", "num_kv_heads"), "cache.num_kv_heads", 1, 1 << 16);
    c.head_size = integer(required(n, "cache", "head_size"), "cache.head_size", 1, 1 << 16);
    if (auto l = n["layout"]) {
      expect_map(l, "cache.layout");
      only_keys(l, "cache.layout", {"order", "k_scales", "v_scales"});
      if (auto o = l["order"]) {
        c.layout.order = scalar(o, "cache.layout.order", "HND or NHD");
        if (c.layout.order != "HND" && c.layout.order != "NHD") {
          fail(o, "cache.layout.order", fmt::format("expected HND or NHD, found {}", found(o)));
        }
      }
      if (auto s = l["k_scales"]) c.layout.k_scales = name_word(s, "cache.layout.k_scales");
      if (auto s = l["v_scales"]) c.layout.v_scales = name_word(s, "cache.layout.v_scales");
    }
    if (auto s = n["k_scale"]) c.k_scale = positive_float(s, "cache.k_scale");
    if (auto s = n["v_scale"]) c.v_scale = positive_float(s, "cache.v_scale");
  }

  void parse_log(const YAML::Node& n) {
    expect_map(n, "log");
    only_keys(n, "log", {"level"});
    if (auto l = n["level"]) {
      cfg_.log.level = scalar(l, "log.level", "a log level");
      if (!is_log_level(cfg_.log.level)) {
        fail(l, "log.level", fmt::format("expected {}, found {}", log_level_words(), found(l)));
      }
    }
  }

  // ---- typed scalars (public: ConfigSection reads a program's own section with them) -----------
 public:
  // Where a value is. A key with no value ("head_size:") has a null node whose own mark is
  // wherever the parser stopped, so errors about it point at its key instead.
  Mark mark_of(const YAML::Node& n) const {
    if (n.IsNull()) {
      for (const auto& [node, mark] : null_values_) {
        if (node.is(n)) return mark;
      }
    }
    return raw_mark(n);
  }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg) {
    throw ConfigError(cfg_.source, mark_of(n), key, msg);
  }

  void record(const YAML::Node& n, const std::string& key) {
    cfg_.marks[key] = mark_of(n);
    untagged(n, key);
  }

  // A YAML tag (!!float 16, !!str 5, !custom x) asks for a type kvq would not give the value:
  // refused, not ignored, so that the file means one thing to every reader. "?" is no tag, "!"
  // the one a quoted scalar has.
  void untagged(const YAML::Node& n, const std::string& key) {
    const std::string& tag = n.Tag();
    if (tag.empty() || tag == "?" || tag == "!") return;
    std::string shown = tag;
    if (constexpr std::string_view core = "tag:yaml.org,2002:"; shown.starts_with(core)) {
      shown = "!!" + shown.substr(core.size());
    }
    fail(n, key.empty() ? "<root>" : key,
         fmt::format("YAML tag '{}': expected a plain value without a tag", message_text(shown)));
  }

  void expect_map(const YAML::Node& n, const std::string& key) {
    record(n, key.empty() ? "<root>" : key);
    if (!n.IsMap()) fail(n, key, fmt::format("expected a mapping, found {}", found(n)));
  }

  // Every key of mapping `n` is one of `allowed`, a plain word, and given once: YAML parsers
  // differ on which of two equal keys wins (yaml-cpp the first, PyYAML the last), so an engine and
  // kvq could read different geometry from one file.
  void only_keys(const YAML::Node& n, const std::string& prefix,
                 const std::vector<std::string_view>& allowed) {
    std::map<std::string, Mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->second.IsNull()) null_values_.emplace_back(it->second, raw_mark(it->first));
      untagged(it->first, prefix);
      if (!it->first.IsScalar()) {
        fail(it->first, prefix.empty() ? "<root>" : prefix,
             fmt::format("expected a key name, found {}", found(it->first)));
      }
      const std::string name = it->first.Scalar();
      const std::string shown = message_text(name);  // a key that is not ours may be anything
      const std::string key = prefix.empty() ? shown : prefix + "." + shown;
      if (const auto [first, added] = seen.emplace(name, raw_mark(it->first)); !added) {
        fail(it->first, key,
             fmt::format("key '{}' given twice (first at line {}, column {})", shown,
                         first->second.line, first->second.column));
      }
      bool ok = false;
      for (auto a : allowed) ok = ok || a == name;
      if (!ok) {
        std::string list;
        for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
        fail(it->first, key,
             fmt::format("unknown key '{}'{}: expected one of {}", shown,
                         prefix.empty() ? "" : " in '" + prefix + "'", list));
      }
    }
  }

  YAML::Node required(const YAML::Node& parent, const std::string& prefix, const char* name) {
    auto n = parent[name];
    if (!n) fail(parent, prefix + "." + name, fmt::format("missing required key '{}'", name));
    return n;
  }

  std::string scalar(const YAML::Node& n, const std::string& key, const char* what) {
    record(n, key);
    if (!n.IsScalar()) fail(n, key, fmt::format("expected {}, found {}", what, found(n)));
    return n.Scalar();
  }

  // A plugin/format/arrangement name: letters, digits, '_' and '-'.
  std::string name_word(const YAML::Node& n, const std::string& key) {
    std::string s = scalar(n, key, "a name");
    bool ok = !s.empty();
    for (char ch : s)
      ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-');
    if (!ok)
      fail(n, key, fmt::format("expected a name (letters, digits, '_', '-'), found {}", found(n)));
    return s;
  }

  int64_t integer(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) {
    const std::string what = lo == 1 ? "a positive integer" : "a non-negative integer";
    std::string s = scalar(n, key, what.c_str());
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
      fail(n, key, fmt::format("expected {}, found {}", what, found(n)));
    }
    if (s.size() > 1 && s[0] == '0') {  // 010: 10 here and in YAML 1.2, 8 in YAML 1.1 readers
      fail(n, key,
           fmt::format("expected {} without leading zeros, found {} (YAML 1.1 reads it as octal)",
                       what, found(n)));
    }
    if (v < lo || v > hi)
      fail(n, key, fmt::format("expected an integer in [{}, {}], found {}", lo, hi, v));
    return v;
  }

  float positive_float(const YAML::Node& n, const std::string& key) {
    std::string s = scalar(n, key, "a positive number");
    const std::optional<double> v = parse_number(s);
    if (!v) fail(n, key, fmt::format("expected a positive number, found {}", found(n)));
    const auto f = static_cast<float>(*v);
    if (!std::isfinite(f) || !(f > 0.0f)) {
      fail(n, key, fmt::format("expected a finite number > 0, found {}", s));
    }
    return f;
  }

  std::vector<std::string> string_list(const YAML::Node& n, const std::string& key) {
    record(n, key);
    if (!n.IsSequence())
      fail(n, key, fmt::format("expected a list of folders, found {}", found(n)));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < n.size(); ++i) {
      out.push_back(scalar(n[i], fmt::format("{}[{}]", key, i), "a folder path"));
    }
    return out;
  }

  std::array<int64_t, 2> range(const YAML::Node& n, const std::string& key, int64_t lo,
                               int64_t hi) {
    record(n, key);
    if (!n.IsSequence() || n.size() != 2) {
      fail(n, key, fmt::format("expected [min, max], found {}", found(n)));
    }
    std::array<int64_t, 2> r{integer(n[0], key + "[0]", lo, hi),
                             integer(n[1], key + "[1]", lo, hi)};
    if (r[0] > r[1]) fail(n, key, fmt::format("expected min <= max, found [{}, {}]", r[0], r[1]));
    return r;
  }

 private:
  Config& cfg_;
  const std::vector<ConfigSectionReader>& sections_;
  std::vector<std::pair<YAML::Node, Mark>> null_values_;
};

}  // namespace

const std::string& ConfigSection::name() const noexcept {
  return impl_->name;
}

const Config& ConfigSection::config() const noexcept {
  return impl_->parser.config();
}

void ConfigSection::only_keys(const std::vector<std::string_view>& allowed) const {
  impl_->parser.only_keys(impl_->node, impl_->name, allowed);
}

bool ConfigSection::has(const std::string& key) const {
  return static_cast<bool>(impl_->node[key]);
}

int64_t ConfigSection::integer(const std::string& key, int64_t lo, int64_t hi) const {
  return impl_->parser.integer(impl_->node[key], impl_->key(key), lo, hi);
}

std::array<int64_t, 2> ConfigSection::range(const std::string& key, int64_t lo, int64_t hi) const {
  return impl_->parser.range(impl_->node[key], impl_->key(key), lo, hi);
}

void ConfigSection::fail(const std::string& key, const std::string& message) const {
  const YAML::Node& n = impl_->node;
  impl_->parser.fail(n[key] ? n[key] : n, impl_->key(key), message);
}

Config parse_config(std::string_view yaml, const std::string& source,
                    const std::vector<ConfigSectionReader>& sections) {
  Config cfg;
  cfg.source = source;
  YAML::Node root;
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(yaml));
    // A second document ("---") would be ignored by a loader of one: refused, not skipped.
    if (documents.size() > 1) {
      const YAML::Mark m = documents[1].Mark();
      throw ConfigError(source, m.is_null() ? Mark{1, 1} : Mark{m.line + 1, m.column + 1}, "",
                        "a second YAML document: expected one config per file");
    }
    if (!documents.empty()) root = documents[0];
  } catch (const YAML::Exception& e) {
    Mark m = e.mark.is_null() ? Mark{1, 1} : Mark{e.mark.line + 1, e.mark.column + 1};
    throw ConfigError(source, m, "", "YAML syntax error: " + message_text(e.msg, 160));
  }
  Parser(cfg, sections).parse_root(root);
  return cfg;
}

Config load_config(const std::filesystem::path& file,
                   const std::vector<ConfigSectionReader>& sections) {
  const std::string shown = message_text(file.string(), 4096);
  // Opened without waiting (O_NONBLOCK): a FIFO is refused below, never waited on for a writer
  // that may never come. Read through the descriptor that was checked, so what is read is what
  // was checked.
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    // A path that cannot name a file (too long, a loop of links, a folder without search
    // permission, a file inside a file) is the caller's to fix: bad usage, not a failure of kvq.
    const bool bad_path = err == ENAMETOOLONG || err == ELOOP || err == EACCES || err == EPERM ||
                          err == ENOTDIR || err == ENXIO;
    throw Error(bad_path ? ErrorCode::invalid_argument : ErrorCode::io,
                fmt::format("{}: cannot open config file ({}): expected a readable YAML file",
                            shown, std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw Error(ErrorCode::io,
                fmt::format("{}: cannot read the config file ({})", shown, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: a folder: expected a YAML config file", shown));
  }
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: {}: expected a YAML config file (a regular file)", shown,
                            S_ISFIFO(st.st_mode) ? "a FIFO" : "a socket"));
  }
  // Reads block again from here (a character device such as /dev/zero is read as a stream).
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // A config is a few hundred bytes; a stream that goes on (/dev/zero, a wrong path to a
  // checkpoint) is refused after kMaxConfigBytes, not read until memory runs out.
  constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;
  std::string text(kMaxConfigBytes + 1, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(ErrorCode::io,
                  fmt::format("{}: cannot read the config file ({})", shown, std::strerror(errno)));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  if (text.size() > kMaxConfigBytes) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("{}: more than {} bytes: expected a YAML config file", shown, kMaxConfigBytes));
  }
  return parse_config(text, file.string(), sections);
}

}  // namespace kvq
