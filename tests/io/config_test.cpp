// Config parsing: good files parse into the right structs; every malformed input is refused
// with a message that names the key and the right FILE:LINE:COL.
#include "kvq/io/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "kvq/core/page_layout.h"

namespace kvq {
namespace {

constexpr const char* kGood = R"(backend: auto
plugin_paths: [plugins, /opt/kvq]
device: cuda:1
threads: 2
cache:
  format: nvfp4
  num_blocks: 1024
  block_size: 16
  num_kv_heads: 8
  head_size: 128
  layout: { order: NHD, k_scales: linear, v_scales: sm100_swizzled }
  k_scale: 0.5
  v_scale: 2e-2
log:
  level: debug
)";

TEST(Config, ParsesEveryKey) {
  Config c = parse_config(kGood, "good.yaml");
  EXPECT_EQ(c.backend, "auto");
  ASSERT_EQ(c.plugin_paths.size(), 2u);
  EXPECT_EQ(c.plugin_paths[1], "/opt/kvq");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.cache.format, "nvfp4");
  EXPECT_EQ(c.cache.num_blocks, 1024);
  EXPECT_EQ(c.cache.block_size, 16);
  EXPECT_EQ(c.cache.num_kv_heads, 8);
  EXPECT_EQ(c.cache.head_size, 128);
  EXPECT_EQ(c.cache.layout.order, "NHD");
  EXPECT_EQ(c.cache.layout.k_scales, "linear");
  EXPECT_EQ(c.cache.layout.v_scales, "sm100_swizzled");
  EXPECT_EQ(c.cache.k_scale, 0.5f);
  EXPECT_EQ(c.cache.v_scale, 0.02f);
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.marks.at("cache.head_size").line, 10);
  EXPECT_EQ(c.marks.at("cache.head_size").column, 14);
}

TEST(Config, DefaultsForOptionalKeys) {
  Config c = parse_config(
      "cache: {format: nvfp4, num_blocks: 4, block_size: 16, num_kv_heads: 1, head_size: 64}\n");
  EXPECT_EQ(c.backend, "auto");
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.threads, 0);
  EXPECT_EQ(c.cache.layout.order, "HND");
  EXPECT_EQ(c.cache.layout.k_scales, "");  // not given: the format's default ...
  EXPECT_EQ(c.cache.layout.v_scales, "");
  const CacheSpec resolved = PageLayout::resolved(c.cache);  // ... which the layout names
  EXPECT_EQ(resolved.layout.k_scales, "linear");
  EXPECT_EQ(resolved.layout.v_scales, "sm100_swizzled");
  EXPECT_EQ(c.cache.k_scale, 1.0f);
}

// A program's own section (kvq-demo's `demo:`) is read through the hook, with the config's rules
// and marks; in a load that does not name it, the same key is an unknown key.
const std::string kWithSection =
    "cache: {format: nvfp4, num_blocks: 4, block_size: 16, num_kv_heads: 1, head_size: 64}\n"
    "extra:\n  count: 3\n  span: [2, 5]\n";

TEST(ConfigSection, IsReadWithTheConfigsRulesAndMarks) {
  int64_t count = 0, cache_blocks = 0;
  std::array<int64_t, 2> span{};
  const Config c =
      parse_config(kWithSection, "x.yaml", {{"extra", [&](const ConfigSection& s) {
                                               EXPECT_EQ(s.name(), "extra");
                                               s.only_keys({"count", "span", "unused"});
                                               EXPECT_FALSE(s.has("unused"));
                                               count = s.integer("count", 1, 10);
                                               span = s.range("span", 0, 8);
                                               cache_blocks = s.config().cache.num_blocks;
                                             }}});
  EXPECT_EQ(count, 3);
  EXPECT_EQ(span, (std::array<int64_t, 2>{2, 5}));
  EXPECT_EQ(cache_blocks, 4) << "the config's own keys are parsed before any section";
  EXPECT_EQ(c.marks.at("extra.count").line, 3);
  EXPECT_EQ(c.marks.at("extra.span").column, 9);
}

TEST(ConfigSection, IsAnUnknownKeyWhereNotRead) {
  try {
    parse_config(kWithSection, "x.yaml");
    FAIL() << "an unread section was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "x.yaml:2:1: extra: unknown key 'extra': expected one of backend, plugin_paths, "
              "device, threads, cache, log");
  }
}

TEST(ConfigSection, ErrorsNameTheSectionsKeyAtItsMark) {
  const auto fails = [](const std::function<void(const ConfigSection&)>& read) -> std::string {
    try {
      parse_config(kWithSection, "x.yaml", {{"extra", read}});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(fails([](const ConfigSection& s) { s.only_keys({"count"}); }),
            "x.yaml:4:3: extra.span: unknown key 'span' in 'extra': expected one of count");
  EXPECT_EQ(fails([](const ConfigSection& s) { (void)s.integer("count", 4, 10); }),
            "x.yaml:3:10: extra.count: expected an integer in [4, 10], found 3");
  EXPECT_EQ(fails([](const ConfigSection& s) { (void)s.range("span", 0, 4); }),
            "x.yaml:4:13: extra.span[1]: expected an integer in [0, 4], found 5");
  EXPECT_EQ(fails([](const ConfigSection& s) { s.fail("span", "too wide"); }),
            "x.yaml:4:9: extra.span: too wide");
  EXPECT_EQ(fails([](const ConfigSection& s) { s.fail("absent", "needed"); }),
            "x.yaml:3:3: extra.absent: needed")
      << "an absent key is reported at its section";
}

TEST(Config, LoadsFileAndNamesIt) {
  const auto path = std::filesystem::temp_directory_path() / "kvq_config_test_bad.yaml";
  std::ofstream(path) << "cache:\n  format: nvfp4\n  num_blocks: -3\n";
  try {
    load_config(path);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() +
                                         ":3:15: cache.num_blocks: expected an integer in [1, "
                                         "1099511627776], found -3");
  }
  std::filesystem::remove(path);
}

// load_config(file) fails with `code` (not a ConfigError: there is no line to point at) and a
// message containing `fragment`.
void expect_load_error(const std::string& file, ErrorCode code, const std::string& fragment) {
  try {
    load_config(file);
    FAIL() << file << ": loaded";
  } catch (const ConfigError&) {
    FAIL() << "not a config error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Config, MissingFileIsIoError) {
  expect_load_error("/nonexistent/kvq.yaml", ErrorCode::io,
                    "/nonexistent/kvq.yaml: cannot open config file");
}

// A stream that does not end is refused after 1 MiB (a config is a few hundred bytes).
TEST(Config, EndlessStreamIsRefused) {
  expect_load_error("/dev/zero", ErrorCode::invalid_argument,
                    "/dev/zero: more than 1048576 bytes: expected a YAML config file");
}

// A FIFO is refused at once: opening one for reading waits for a writer, for ever (ctest's
// timeout would end a regression).
TEST(Config, FifoIsRefusedNotWaitedOn) {
  const auto fifo = std::filesystem::path(testing::TempDir()) /
                    ("kvq_config_fifo_" + std::to_string(::getpid()) + ".yaml");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_load_error(fifo.string(), ErrorCode::invalid_argument,
                    fifo.string() + ": a FIFO: expected a YAML config file (a regular file)");
  std::filesystem::remove(fifo);
}

// Paths that cannot name a file are the caller's to fix (exit 2), each named with the reason:
// a name too long, a loop of links, a file where a folder should be.
TEST(Config, PathsThatNameNoFileAreUsageErrors) {
  const auto dir = std::filesystem::path(testing::TempDir()) /
                   ("kvq_config_paths_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string long_name = (dir / (std::string(300, 'c') + ".yaml")).string();
  expect_load_error(long_name, ErrorCode::invalid_argument,
                    long_name +
                        ": cannot open config file (File name too long): expected a "
                        "readable YAML file");
  std::filesystem::create_symlink(dir / "loop.yaml", dir / "loop.yaml");
  expect_load_error((dir / "loop.yaml").string(), ErrorCode::invalid_argument,
                    "loop.yaml: cannot open config file (Too many levels of symbolic links)");
  std::ofstream(dir / "plain") << "x";
  expect_load_error((dir / "plain" / "kvq.yaml").string(), ErrorCode::invalid_argument,
                    "kvq.yaml: cannot open config file (Not a directory)");
  std::filesystem::remove_all(dir);
}

TEST(Config, ParseNumberIsOneGrammar) {
  for (const char* good : {"1", "0.5", "2e-2", "1e-05", "-3", ".5", "3.4028235e+38"}) {
    EXPECT_TRUE(parse_number(good).has_value()) << good;
  }
  EXPECT_EQ(parse_number("0.03125"), 0.03125);
  EXPECT_TRUE(std::isinf(*parse_number(".inf")));
  EXPECT_TRUE(std::isnan(*parse_number(".nan")));
  for (const char* bad : {"", " 1.0", "1.0 ", "+2", "0x1p3", "0X10", "1,5", "Infinity", "INF",
                          "nan(1)", "-", "1e", "--1", "1.0\n"}) {
    EXPECT_FALSE(parse_number(bad).has_value()) << bad;
  }
}

TEST(Config, FolderIsAUsageError) {
  expect_load_error(testing::TempDir(), ErrorCode::invalid_argument,
                    ": a folder: expected a YAML config file");
}

struct Malformed {
  const char* name;
  std::string yaml;
  int line;
  int column;
  std::string message;  // expected to appear in what()
};

const std::string kCacheHead = "cache:\n  format: nvfp4\n";
const std::string kGeometry =
    "  num_blocks: 8\n  block_size: 16\n  num_kv_heads: 2\n  head_size: 64\n";

std::vector<Malformed> malformed_cases() {
  return {
      {"syntax_unclosed_flow", "cache: {format: nvfp4, num_blocks: 4\n", 2, 1, "YAML syntax error"},
      {"syntax_bad_indent", "cache:\n  format: nvfp4\n num_blocks: 4\n", 3, 2, "YAML syntax error"},
      {"empty", "", 1, 1, "the config is empty"},
      {"root_not_map", "- a\n- b\n", 1, 1, "expected a mapping, found a list"},
      {"unknown_top_key", "backnd: auto\n" + kCacheHead + kGeometry, 1, 1,
       "unknown key 'backnd': expected one of backend, plugin_paths"},
      {"unknown_cache_key", kCacheHead + kGeometry + "  numblocks: 3\n", 7, 3,
       "cache.numblocks: unknown key 'numblocks' in 'cache'"},
      {"unknown_layout_key", kCacheHead + kGeometry + "  layout: {order: HND, v_scale: linear}\n",
       7, 24, "unknown key 'v_scale' in 'cache.layout'"},
      {"missing_cache", "backend: auto\n", 1, 1, "missing required section 'cache'"},
      {"missing_head_size", kCacheHead + "  num_blocks: 8\n  block_size: 16\n  num_kv_heads: 2\n",
       2, 3, "cache.head_size: missing required key 'head_size'"},
      {"missing_format", "cache:\n" + kGeometry, 2, 3, "missing required key 'format'"},
      {"negative_size", kCacheHead + "  num_blocks: 8\n  block_size: -16\n  num_kv_heads: 2\n", 4,
       15, "cache.block_size: expected an integer in [1, 1048576], found -16"},
      {"zero_heads", kCacheHead + "  num_blocks: 8\n  block_size: 16\n  num_kv_heads: 0\n", 5, 17,
       "expected an integer in [1, 65536], found 0"},
      {"wrong_type_string", kCacheHead + "  num_blocks: many\n", 3, 15,
       "cache.num_blocks: expected a positive integer, found 'many'"},
      {"wrong_type_float", kCacheHead + "  num_blocks: 1.5\n", 3, 15,
       "expected a positive integer, found '1.5'"},
      {"wrong_type_list", kCacheHead + "  num_blocks: [1]\n", 3, 15,
       "expected a positive integer, found a list"},
      {"zero_scale", kCacheHead + kGeometry + "  k_scale: 0\n", 7, 12,
       "cache.k_scale: expected a finite number > 0, found 0"},
      {"negative_scale", kCacheHead + kGeometry + "  v_scale: -1.0\n", 7, 12,
       "cache.v_scale: expected a finite number > 0, found -1.0"},
      {"nan_scale", kCacheHead + kGeometry + "  k_scale: .nan\n", 7, 12,
       "expected a finite number > 0, found .nan"},
      {"inf_scale", kCacheHead + kGeometry + "  k_scale: .inf\n", 7, 12,
       "expected a finite number > 0, found .inf"},
      {"overflowing_scale", kCacheHead + kGeometry + "  k_scale: 1e39\n", 7, 12,
       "expected a finite number > 0, found 1e39"},
      {"unknown_order", kCacheHead + kGeometry + "  layout:\n    order: HDN\n", 8, 12,
       "cache.layout.order: expected HND or NHD, found 'HDN'"},
      {"unknown_log_level", kCacheHead + kGeometry + "log: {level: loud}\n", 7, 14,
       "log.level: expected trace, debug, info, warn, error or off, found 'loud'"},
      // spdlog's own aliases are not config words (docs/config.md lists six).
      {"spdlog_alias_log_level", kCacheHead + kGeometry + "log: {level: warning}\n", 7, 14,
       "log.level: expected trace, debug, info, warn, error or off, found 'warning'"},
      {"bad_device", "device: gpu0\n" + kCacheHead + kGeometry, 1, 9,
       "device: expected auto, cpu or cuda:N, found 'gpu0'"},
      {"bad_backend_word", "backend: 'my backend'\n" + kCacheHead + kGeometry, 1, 10,
       "backend: expected a name (letters, digits, '_', '-'), found 'my backend'"},
      {"plugin_paths_not_list", "plugin_paths: plugins\n" + kCacheHead + kGeometry, 1, 15,
       "plugin_paths: expected a list of folders, found 'plugins'"},
      {"negative_threads", "threads: -1\n" + kCacheHead + kGeometry, 1, 10,
       "threads: expected an integer in [0, 4096], found -1"},
      {"cache_not_map", "cache: 5\n", 1, 8, "cache: expected a mapping, found '5'"},
      {"duplicate_key", kCacheHead + kGeometry + "  head_size: 128\n", 7, 3,
       "cache.head_size: key 'head_size' given twice (first at line 6, column 3)"},
      {"duplicate_section", kCacheHead + kGeometry + kCacheHead + kGeometry, 7, 1,
       "cache: key 'cache' given twice (first at line 1, column 1)"},
      {"duplicate_flow_key", kCacheHead + kGeometry + "log: {level: info, level: bogus}\n", 7, 20,
       "log.level: key 'level' given twice (first at line 7, column 7)"},
      {"list_as_key", kCacheHead + kGeometry + "  [a, b]: 1\n", 7, 3,
       "cache: expected a key name, found a list"},
      {"second_document", kCacheHead + kGeometry + "---\nthreads: 2\n", 8, 1,
       "a second YAML document: expected one config per file"},
      {"null_value", kCacheHead + "  num_blocks:\n", 3, 3,
       "expected a positive integer, found nothing"},
      // Text from the file is shown escaped and cut short: one line, whatever the file holds.
      {"scalar_with_a_newline", kCacheHead + "  num_blocks: \"4\\nkvq: c.yaml: ok\"\n", 3, 15,
       "expected a positive integer, found '4\\nkvq: c.yaml: ok'"},
      {"leading_zero", kCacheHead + "  num_blocks: 010\n", 3, 15,
       "cache.num_blocks: expected a positive integer without leading zeros, found '010' (YAML "
       "1.1 reads it as octal)"},
      {"long_unknown_key", kCacheHead + kGeometry + "  " + std::string(200, 'k') + ": 1\n", 7, 3,
       "unknown key '" + std::string(64, 'k') + "...' in 'cache'"},
      // yaml-cpp's own message quotes the byte: escaped, so that the file cannot drive the
      // terminal.
      {"syntax_control_byte", "cache:\n  format: \"a\\\x1b[31mRED\"\n", 2, 15,
       "YAML syntax error: unknown escape character: \\x1b"},
      // A YAML tag asks for a type kvq would not give the value: refused, not ignored, on a
      // value, a key, a section and a list item alike.
      {"tag_on_integer", kCacheHead + "  num_blocks: 8\n  block_size: !!float 16\n", 4, 15,
       "cache.block_size: YAML tag '!!float': expected a plain value without a tag"},
      {"tag_on_scale", kCacheHead + kGeometry + "  k_scale: !!str 1.0\n", 7, 12,
       "cache.k_scale: YAML tag '!!str': expected a plain value without a tag"},
      {"custom_tag", kCacheHead + kGeometry + "  k_scale: !scale 1.0\n", 7, 12,
       "cache.k_scale: YAML tag '!scale': expected a plain value without a tag"},
      {"tag_on_key", kCacheHead + kGeometry + "  !!str k_scale: 1.0\n", 7, 3,
       "cache: YAML tag '!!str': expected a plain value without a tag"},
      {"tag_on_section", "cache: !!map\n  format: nvfp4\n" + kGeometry, 1, 8,
       "cache: YAML tag '!!map': expected a plain value without a tag"},
      {"tag_on_list_item", "plugin_paths: [!!str a]\n" + kCacheHead + kGeometry, 1, 16,
       "plugin_paths[0]: YAML tag '!!str'"},
      // One number grammar (parse_number): what from_chars reads, no more.
      {"hex_scale", kCacheHead + kGeometry + "  k_scale: 0x1p3\n", 7, 12,
       "cache.k_scale: expected a positive number, found '0x1p3'"},
      {"plus_scale", kCacheHead + kGeometry + "  k_scale: +2\n", 7, 12,
       "cache.k_scale: expected a positive number, found '+2'"},
      {"quoted_space_scale", kCacheHead + kGeometry + "  k_scale: ' 1.0'\n", 7, 12,
       "cache.k_scale: expected a positive number, found ' 1.0'"},
      {"infinity_word_scale", kCacheHead + kGeometry + "  k_scale: Infinity\n", 7, 12,
       "cache.k_scale: expected a positive number, found 'Infinity'"},
  };
}

class ConfigMalformed : public testing::TestWithParam<Malformed> {};

TEST_P(ConfigMalformed, NamesLineColumnAndKey) {
  const Malformed& m = GetParam();
  try {
    parse_config(m.yaml, "bad.yaml");
    FAIL() << m.name << ": parsed without error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(m.message), std::string::npos) << what;
    EXPECT_EQ(e.mark().line, m.line) << what;
    EXPECT_EQ(e.mark().column, m.column) << what;
    EXPECT_EQ(
        what.rfind("bad.yaml:" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": ", 0),
        0u)
        << what;
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(std::none_of(what.begin(), what.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20;
    })) << what;  // one line, and nothing a terminal would act on
  }
}

INSTANTIATE_TEST_SUITE_P(All, ConfigMalformed, testing::ValuesIn(malformed_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Config, FailAtFindsNearestMarkedParent) {
  Config c = parse_config(kCacheHead + kGeometry + "  layout:\n    order: HND\n", "x.yaml");
  try {
    c.fail_at("cache.layout.v_scales", "unknown arrangement");
    FAIL();
  } catch (const ConfigError& e) {
    // v_scales is absent: the error points at its parent, cache.layout (line 8).
    EXPECT_EQ(std::string(e.what()), "x.yaml:8:5: cache.layout.v_scales: unknown arrangement");
  }
}

TEST(Config, ParseDevice) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_FALSE(parse_device("cuda:"));
  EXPECT_FALSE(parse_device("cuda:-1"));
  EXPECT_FALSE(parse_device("cuda:1x"));
  EXPECT_FALSE(parse_device("auto"));
}

}  // namespace
}  // namespace kvq
