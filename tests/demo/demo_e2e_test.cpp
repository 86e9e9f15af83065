// kvq-demo end to end (label plugin: it loads reference_cpu): the JSON it writes, reproducibility,
// --verify, the exit statuses of bad configs and backends, and Ctrl-C.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "demo_process.h"

namespace {

using namespace kvq::demo::test;

constexpr int64_t kHeads = 4, kHeadSize = 128, kBlockSize = 16;  // data/demo_tiny.yaml

// The fixture plugins' folders: $KVQ_BUILD_DIR/test-plugins, else the compiled-in KVQ_FIXTURE_DIR.
// CMake builds the fixtures this test loads with it, so a missing one is a failure, not a skip.
fs::path fixture_dir() {
  return env_path_or("KVQ_BUILD_DIR", "test-plugins", KVQ_FIXTURE_DIR);
}

TEST_F(DemoTest, TinyConfigJsonHasTheIssuesKeysAndSaneValues) {
  const json j = run_json({"--config", data("demo_tiny.yaml").string()});
  const std::vector<std::string> keys = {"backend",
                                         "backend_version",
                                         "device",
                                         "cache",
                                         "workload",
                                         "tokens_written",
                                         "prefill_writes",
                                         "decode_writes",
                                         "padding_slots",
                                         "pages_used",
                                         "pages_total",
                                         "pages_distinct",
                                         "pages_reused",
                                         "pages_in_use_at_end",
                                         "bytes_per_token",
                                         "bytes_per_token_bf16",
                                         "compression_vs_bf16",
                                         "k_rel_error",
                                         "v_rel_error",
                                         "attention_rel_error",
                                         "attention_cosine",
                                         "attention_queries",
                                         "gpu_attention",
                                         "gpu_attention_reason",
                                         "write_tokens_per_s",
                                         "write_gb_per_s",
                                         "write_seconds",
                                         "wall_s",
                                         "blocks_leaked",
                                         "cache_fnv1a64",
                                         "shards"};
  std::vector<std::string> found;
  for (auto it = j.begin(); it != j.end(); ++it) found.push_back(it.key());
  EXPECT_EQ(found, keys);

  EXPECT_EQ(j["backend"], "reference_cpu");
  // The run is reproducible from the JSON alone: the config's cache and workload, seed included.
  EXPECT_EQ(j["cache"]["num_kv_heads"], kHeads);
  EXPECT_EQ(j["cache"]["v_scales"], "sm100_swizzled");
  EXPECT_EQ(j["workload"]["seed"], 7);
  EXPECT_EQ(j["workload"]["sequences"], 10);
  EXPECT_EQ(j["workload"]["prompt_tokens"], json::parse("[8, 120]"));
  EXPECT_EQ(j["workload"]["sequences_finished"].get<int64_t>() +
                j["workload"]["sequences_live_at_end"].get<int64_t>(),
            10);
  EXPECT_GE(j["prefill_writes"], 10);
  EXPECT_GT(j["decode_writes"], 0);
  EXPECT_LE(j["pages_in_use_at_end"].get<int64_t>(), j["pages_used"].get<int64_t>());
  EXPECT_GT(j["write_seconds"].get<double>(), 0.0);
  EXPECT_NE(j["device"].get<std::string>().find("CPU"), std::string::npos) << j["device"];
  // Exactly from the page layout: page = 2 sides x H x T x (D/2 data + D/16 scale bytes).
  const double page_bytes = 2.0 * kHeads * kBlockSize * (kHeadSize / 2 + kHeadSize / 16);
  EXPECT_EQ(j["bytes_per_token"].get<double>(), page_bytes / kBlockSize);
  EXPECT_EQ(j["bytes_per_token_bf16"].get<double>(), 2.0 * kHeads * kHeadSize * 2);
  EXPECT_EQ(j["compression_vs_bf16"].get<double>(), 256.0 / 72.0);
  EXPECT_GT(j["k_rel_error"].get<double>(), 0.05);
  EXPECT_LT(j["k_rel_error"].get<double>(), 0.15);
  EXPECT_GT(j["v_rel_error"].get<double>(), 0.05);
  EXPECT_LT(j["v_rel_error"].get<double>(), 0.15);
  EXPECT_GT(j["attention_cosine"].get<double>(), 0.99);
  EXPECT_LT(j["attention_rel_error"].get<double>(), 0.15);
  EXPECT_GT(j["attention_rel_error"].get<double>(), 0.0);
  // reference_cpu's attention is the host's: no GPU attention, and the JSON says why.
  EXPECT_EQ(j["gpu_attention"], false);
  EXPECT_EQ(j["gpu_attention_reason"],
            "backend reference_cpu has no GPU attention (it runs on cpu)");
  // Every allocated block was freed or is owned by exactly one live sequence.
  EXPECT_EQ(j["blocks_leaked"], 0);
  EXPECT_EQ(j["pages_total"], 48);
  EXPECT_GT(j["pages_used"].get<int64_t>(), 0);
  EXPECT_LE(j["pages_used"].get<int64_t>(), 48);
  EXPECT_GT(j["tokens_written"].get<int64_t>(), 10 * 8);
  EXPECT_GT(j["write_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["write_gb_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["wall_s"].get<double>(), 0.0);
  // One shard with every head, on the CPU.
  ASSERT_EQ(j["shards"].size(), 1u);
  const json& sh = j["shards"][0];
  EXPECT_EQ(sh["device"], "cpu");
  EXPECT_EQ(sh["kv_heads"], json::parse("[0, 4]"));
  EXPECT_EQ(sh["page_bytes"].get<double>(), page_bytes);
  EXPECT_EQ(sh["pages_used"], j["pages_used"]);
  EXPECT_EQ(sh["bytes_used"].get<double>(), j["pages_used"].get<double>() * page_bytes);
  EXPECT_EQ(sh["cache_bytes"].get<double>(), 48 * page_bytes);
  EXPECT_EQ(sh["head_fnv1a64"].size(), 4u);
  EXPECT_EQ(j["cache_fnv1a64"].get<std::string>().size(), 18u);
  EXPECT_FALSE(j.contains("timeline"));
}

// Each side's error is measured on that side. A scale so large that every group scale of a side
// underflows to zero reads that side back as zeros: its rel L2 error is exactly 1, while the other
// side's is what it was. (The K and V errors of demo_tiny are close, 0.094 and 0.095, so only a
// side that is broken on purpose tells them apart.)
TEST_F(DemoTest, KAndVErrorsAreEachTheirOwnSides) {
  const std::string tiny = slurp(data("demo_tiny.yaml"));
  const auto with = [&](const std::string& key, const std::string& name) {
    std::string text = tiny;
    const auto at = text.find(key + ": 1.0");
    EXPECT_NE(at, std::string::npos) << key;
    text.replace(at, key.size() + 5, key + ": 1000000.0");
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  };
  const json base = run_json({"--config", data("demo_tiny.yaml").string()}, "base.json");
  ASSERT_LT(base["v_rel_error"].get<double>(), 0.15);

  const json v_gone = run_json({"--config", with("v_scale", "v_gone.yaml")}, "v_gone.json");
  EXPECT_EQ(v_gone["v_rel_error"].get<double>(), 1.0);
  EXPECT_EQ(v_gone["k_rel_error"], base["k_rel_error"]);
  // Every attention output is zero then: cosine 0 (not NaN, which the JSON would hold as null).
  EXPECT_EQ(v_gone["attention_rel_error"].get<double>(), 1.0);
  EXPECT_EQ(v_gone["attention_cosine"], 0.0);

  const json k_gone = run_json({"--config", with("k_scale", "k_gone.yaml")}, "k_gone.json");
  EXPECT_EQ(k_gone["k_rel_error"].get<double>(), 1.0);
  EXPECT_EQ(k_gone["v_rel_error"], base["v_rel_error"]);
}

TEST_F(DemoTest, ReportShowsWhatTheIssueAsks) {
  const Outcome r = run({"--config", data("demo_tiny.yaml").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* needle : {"backend     reference_cpu",
                             "4 KV heads x head_size 128, block_size 16, HND, K scales "
                             "linear, V scales sm100_swizzled",
                             "of 48 in use at the peak", "0 leaked",
                             "576 bytes per token in NVFP4 vs 2048 in bf16: "
                             "3.56x smaller",
                             "K rel L2 error 0.", "cosine 0.99", "tokens/s", "GB/s", "wall time",
                             "  gpu attention none: backend reference_cpu has no GPU attention (it "
                             "runs on cpu); attention is measured on the host only (above)\n"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << "no '" << needle << "' in:\n" << r.out;
  }
  // stderr is not a terminal here: plain progress lines, no carriage returns.
  EXPECT_NE(r.err.find("kvq-demo: 100% ("), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
}

// The report's counts mean what they say. The writes line counts padding as the empty rows of
// decode batches only: demo_tiny (batch 3) has both full and partial decode batches, so padding
// is some but fewer than 3 per decode write. GB/s are tokens/s times one token's bf16 K and V.
TEST_F(DemoTest, ReportCountsPaddingPagesAndBytesPerToken) {
  const Outcome r =
      run({"--config", data("demo_tiny.yaml").string(), "--json", (dir_ / "pad.json").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::regex line(
      R"((\d+) tokens: (\d+) prefill writes \+ (\d+) decode writes \((\d+) padding slots\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
  const int64_t decode_writes = std::stoll(m[3]), padding = std::stoll(m[4]);
  EXPECT_GT(decode_writes, 0);
  EXPECT_GT(padding, 0) << "the last decode batches are partial";
  EXPECT_LT(padding, 3 * decode_writes) << "not every decode slot is padding";
  // Pages in use at the end are those the sequences still hold, fewer than at the peak (sequences
  // finish and free theirs on the way).
  const std::regex pages(R"((\d+) of 48 in use at the peak .* (\d+) in use at the end)");
  ASSERT_TRUE(std::regex_search(r.out, m, pages)) << r.out;
  EXPECT_LT(std::stoll(m[2]), std::stoll(m[1]));
  const json j = json::parse(slurp(dir_ / "pad.json"));
  EXPECT_NEAR(j["write_gb_per_s"].get<double>() * 1e9 / j["write_tokens_per_s"].get<double>(),
              2.0 * kHeads * kHeadSize * 2, 1e-6);
}

TEST_F(DemoTest, SameSeedSameNumbers) {
  const std::string cfg = data("demo_tiny.yaml").string();
  const json a = run_json({"--config", cfg}, "a.json");
  const json b = run_json({"--config", cfg}, "b.json");
  EXPECT_EQ(without_timings(a), without_timings(b));
  const json c = run_json({"--config", cfg, "--seed", "8"}, "c.json");
  EXPECT_NE(without_timings(a)["k_rel_error"], without_timings(c)["k_rel_error"]);
  EXPECT_NE(a["tokens_written"], c["tokens_written"]);
  const json d = run_json({"--config", cfg, "--seed", "8"}, "d.json");
  EXPECT_EQ(without_timings(c), without_timings(d));
}

// --formats: one workload through each format, one table, the numbers per format in the JSON.
// bf16 reads back exactly; fp8 and nvfp4 hold 2x and 3.56x the tokens of bf16 in the same memory,
// each with a larger error than the one before.
TEST_F(DemoTest, FormatsRunsTheSameWorkloadThroughEachFormat) {
  const json j = run_json({"--config", data("demo_tiny.yaml").string(), "--formats",
                           "bf16,fp8_e4m3,nvfp4", "--verify"});
  ASSERT_EQ(j["formats"].size(), 3u);
  const json& bf16 = j["formats"][0];
  const json& fp8 = j["formats"][1];
  const json& nvfp4 = j["formats"][2];
  EXPECT_EQ(bf16["cache"]["format"], "bf16");
  EXPECT_EQ(fp8["cache"]["format"], "fp8_e4m3");
  EXPECT_EQ(nvfp4["cache"]["format"], "nvfp4");
  EXPECT_EQ(bf16["tokens_written"], nvfp4["tokens_written"]);
  EXPECT_EQ(bf16["k_rel_error"].get<double>(), 0.0);
  EXPECT_EQ(bf16["attention_cosine"].get<double>(), 1.0);
  EXPECT_GT(fp8["k_rel_error"].get<double>(), 0.0);
  EXPECT_LT(fp8["k_rel_error"].get<double>(), nvfp4["k_rel_error"].get<double>());
  EXPECT_EQ(fp8["capacity_tokens"].get<int64_t>(), 2 * bf16["capacity_tokens"].get<int64_t>());
  EXPECT_EQ(fp8["bytes_per_token"].get<double>(), 2.0 * kHeads * kHeadSize);
  EXPECT_GT(nvfp4["capacity_tokens"].get<int64_t>(), 3 * bf16["capacity_tokens"].get<int64_t>());
  for (const json& f : j["formats"]) EXPECT_EQ(f["verify_differing_bytes"], 0);

  const Outcome bad = run({"--config", data("demo_tiny.yaml").string(), "--formats", "fp8"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--formats: unknown format 'fp8': expected a comma-separated list of "
                         "nvfp4, fp8_e4m3, fp8_e5m2, bf16"),
            std::string::npos)
      << bad.err;
}

TEST_F(DemoTest, VerifyAgainstReferenceCpu) {
  const json j = run_json({"--config", data("demo_tiny.yaml").string(), "--verify"});
  ASSERT_TRUE(j.contains("verify_differing_bytes"));
  EXPECT_EQ(j["verify_differing_bytes"], 0);
}

// A backend whose bytes differ: exit 1 with the count and the first differing byte, counted over
// the shards laid end to end. fixture_skewed changes the first key group of every write of one
// writer, so the first difference lies in that writer's shard.
TEST_F(DemoTest, VerifyMismatchExits1AndNamesTheFirstDifferingByte) {
  const fs::path fixtures = fixture_dir() / "skewed";
  ASSERT_TRUE(fs::exists(fixtures / "libkvq_fixture_skewed.so"))
      << fixtures << " has no libkvq_fixture_skewed.so (target kvq_fixture_skewed, tests/demo)";
  constexpr int64_t kShardCacheBytes = 221184;  // demo_tiny.yaml, 2 KV heads a shard
  for (const char* writer : {"0", "1"}) {
    ASSERT_EQ(setenv("KVQ_FIXTURE_SKEW_WRITER", writer, 1), 0);
    const fs::path json_path = dir_ / (std::string("skewed") + writer + ".json");
    const Outcome r =
        run({"--config", data("demo_tiny.yaml").string(), "--backend", "fixture_skewed",
             "--tensor-parallel", "2", "--verify", "--json", json_path.string()},
            fixtures.string());
    unsetenv("KVQ_FIXTURE_SKEW_WRITER");
    EXPECT_EQ(r.status, 1) << r.err;
    const json j = json::parse(slurp(json_path));
    const int64_t differing = j["verify_differing_bytes"], first = j["verify_first_difference"];
    EXPECT_GT(differing, 0);
    if (writer[0] == '0') {
      EXPECT_GE(first, 0);
      EXPECT_LT(first, kShardCacheBytes) << "the skewed writer is shard 0's";
    } else {
      EXPECT_GE(first, kShardCacheBytes) << "the skewed writer is shard 1's";
      EXPECT_LT(first, 2 * kShardCacheBytes);
    }
    const std::string expected = "kvq-demo: --verify: " + std::to_string(differing) + " of " +
                                 std::to_string(2 * kShardCacheBytes) +
                                 " cache bytes differ between fixture_skewed and reference_cpu "
                                 "(first at byte " +
                                 std::to_string(first) + ")\n";
    EXPECT_TRUE(r.err.ends_with(expected)) << r.err;  // after the progress lines
  }
}

TEST_F(DemoTest, BrokenDemoSectionExits2WithOneLine) {
  const Outcome r = run({"--config", data("broken_demo.yaml").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq-demo: " + data("broken_demo.yaml").string() +
                       ":11:18: demo.prompt_tokens: expected min <= max, found [100, 10]\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(DemoTest, UnknownDemoKeyExits2) {
  const Outcome r = run({"--config", data("demo_unknown_key.yaml").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq-demo: " + data("demo_unknown_key.yaml").string() +
                       ":11:3: demo.max_batches: unknown key 'max_batches' in 'demo': expected "
                       "one of sequences, max_batch, prompt_tokens, decode_tokens, "
                       "query_heads_per_kv_head, seed, gpu_attention_check_every\n");
}

TEST_F(DemoTest, DemoThatCannotFitExits2) {
  const Outcome r = run({"--config", data("demo_too_long.yaml").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq-demo: " + data("demo_too_long.yaml").string() +
                       ":11:18: demo.prompt_tokens: the longest sequence the demo allows "
                       "(prompt_tokens max 120 + decode_tokens max 20 = 140 tokens) needs 9 "
                       "blocks of 16 tokens; cache.num_blocks is 8\n");
}

// Every size the config implies is checked against the memory this process may have before any
// of it is allocated: 2^40 blocks of small pages gave std::bad_alloc from the per-block state
// (exit 1), and 200,000,000 blocks took 2 GB of it before the cache's own allocation refused.
// Now both are a config error at cache.num_blocks (exit 2), at once.
TEST_F(DemoTest, CachesThatCannotFitAreRefusedBeforeAnyAllocation) {
  const auto config = [&](const std::string& blocks) {
    const fs::path file = dir_ / ("blocks_" + blocks + ".yaml");
    std::ofstream(file) << "backend: reference_cpu\ndevice: cpu\ncache:\n  format: nvfp4\n"
                           "  num_blocks: "
                        << blocks
                        << "\n  block_size: 16\n  num_kv_heads: 1\n  head_size: 16\n"
                           "  layout: { order: HND, k_scales: linear, v_scales: linear }\n"
                           "demo:\n  sequences: 1\n  max_batch: 1\n  prompt_tokens: [1, 16]\n"
                           "  decode_tokens: [0, 0]\n";
    return file;
  };
  const auto expect_refused = [&](const Outcome& r, const fs::path& file) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.rfind("kvq-demo: " + file.string() + ":5:15: cache.num_blocks: ", 0), 0u)
        << r.err;
    EXPECT_NE(r.err.find(" bytes of host memory ("), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  const fs::path huge = config("1099511627776");
  expect_refused(run({"--config", huge.string()}), huge);
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer build: its shadow memory does not fit a lowered data limit";
#else
  // 200,000,000 blocks under a 4 GiB data limit (ulimit -d): the cache (57.6 GB) cannot fit, and
  // the refusal must come before the 3.6 GB of per-block state, which would not fit either.
  const fs::path many = config("200000000");
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_DATA, &saved), 0);
  rlimit lower = saved;
  lower.rlim_cur = rlim_t{4} << 30;
  ASSERT_EQ(setrlimit(RLIMIT_DATA, &lower), 0);
  const pid_t pid = start({"--config", many.string()});
  setrlimit(RLIMIT_DATA, &saved);
  const Outcome r = wait(pid);
  expect_refused(r, many);
  EXPECT_NE(r.err.find("(the data limit (ulimit -d))"), std::string::npos) << r.err;
#endif
}

// --json naming the config would replace the YAML with the report: refused before the run.
TEST_F(DemoTest, JsonOverTheConfigIsRefused) {
  const fs::path config = dir_ / "demo.yaml";
  fs::copy_file(data("demo_tiny.yaml"), config);
  const std::string before = slurp(config);
  const Outcome r = run({"--config", config.string(), "--json", config.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq-demo: --json " + config.string() +
                       ": is the --config file: expected a different file\n");
  EXPECT_EQ(slurp(config), before);
}

// A backend the config names that no plugin provides: the config's FILE:LINE:COL, exit 2.
TEST_F(DemoTest, UnknownBackendInTheConfigNamesItsLine) {
  std::string text = slurp(data("demo_tiny.yaml"));
  const std::string line = "\nbackend: reference_cpu\n";  // line 3 of demo_tiny.yaml
  ASSERT_NE(text.find(line), std::string::npos);
  text.replace(text.find(line), line.size(), "\nbackend: no_such_backend\n");
  std::ofstream(dir_ / "nb.yaml") << text;
  const Outcome r = run({"--config", (dir_ / "nb.yaml").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("kvq-demo: " + (dir_ / "nb.yaml").string() +
                            ":3:10: backend: no backend named 'no_such_backend'",
                        0),
            0u)
      << r.err;
}

TEST_F(DemoTest, UnknownBackendExits2) {
  const Outcome r =
      run({"--config", data("demo_tiny.yaml").string(), "--backend", "no_such_backend"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("kvq-demo: no backend named 'no_such_backend'", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(DemoTest, UnavailableBackendByNameExits2) {
  const fs::path fixtures = fixture_dir() / "unavailable";
  ASSERT_TRUE(fs::exists(fixtures / "libkvq_fixture_unavailable.so"))
      << fixtures << " has no libkvq_fixture_unavailable.so (target kvq_plugin_fixtures, "
      << "tests/plugin)";
  const Outcome r =
      run({"--config", data("demo_tiny.yaml").string(), "--backend", "fixture_unavailable"},
          fixtures.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("backend 'fixture_unavailable'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is unavailable: no fixture device"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(DemoTest, BadArgumentsExit2) {
  EXPECT_EQ(run({"--seed", "minus-one"}).status, 2);
  for (const char* bad : {"-1", "9223372036854775808" /* 2^63: past demo.seed's range */, "7x"}) {
    const Outcome r = run({"--seed", bad});
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_EQ(r.err, std::string("kvq-demo: --seed: expected an integer in [0, "
                                 "9223372036854775807], found '") +
                         bad + "'\n");
  }
  EXPECT_EQ(run({"--no-such-flag"}).status, 2);
  const Outcome r = run({"--config", (dir_ / "missing.yaml").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq-demo: " + (dir_ / "missing.yaml").string() + ": no such config file\n");
  const std::string json_in_nowhere = (dir_ / "nowhere" / "out.json").string();
  const Outcome j = run({"--config", data("demo_tiny.yaml").string(), "--json", json_in_nowhere});
  EXPECT_EQ(j.status, 2);
  EXPECT_EQ(j.err, "kvq-demo: --json " + json_in_nowhere + ": no such folder " +
                       (dir_ / "nowhere").string() + "\n");
  EXPECT_EQ(j.out, "");
}

// Ctrl-C, and SIGTERM (kill, timeout, a job scheduler) the same way: the run stops, exit 128 +
// the signal, no JSON and no FILE.tmp.
TEST_F(DemoTest, CtrlCAndSigtermLeaveNoJsonBehind) {
  for (const int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(sig));
    // demo_long.yaml would run for minutes: it is interrupted mid-way on any machine.
    const fs::path file = dir_ / "interrupted.json";
    const pid_t pid = start({"--config", data("demo_long.yaml").string(), "--json", file.string()});
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ASSERT_EQ(kill(pid, sig), 0);
    const Outcome r = wait(pid);
    EXPECT_EQ(r.status, 128 + sig) << r.err;
    EXPECT_NE(r.err.find("kvq-demo: interrupted\n"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(file));
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
  }
}

// --print-config runs nothing: an option beside it would be silently ignored, so it is refused.
TEST_F(DemoTest, PrintConfigTakesNoOtherOption) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--seed", "5"},
                                                {"--config", data("demo_tiny.yaml").string()},
                                                {"--json", (dir_ / "x.json").string()},
                                                {"--tensor-parallel", "2"},
                                                {"--verify"}}) {
    std::vector<std::string> args = {"--print-config"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome r = run(args);
    EXPECT_EQ(r.status, 2) << extra[0];
    EXPECT_EQ(r.err, "kvq-demo: " + extra[0] + " excludes --print-config (try --help)\n");
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
}

TEST_F(DemoTest, NoArgumentsRunsTheEmbeddedDefault) {
  const Outcome printed = run({"--print-config"});
  ASSERT_EQ(printed.status, 0);
  EXPECT_NE(printed.out.find("v_scales: sm100_swizzled"), std::string::npos);
  // The README's first command ends with a bare `kvq-demo`: backend auto, 8 heads x 128.
  const Outcome r = run({});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("8 KV heads x head_size 128, block_size 16, HND, K scales linear, "
                       "V scales sm100_swizzled"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1152 bytes per token in NVFP4 vs 4096 in bf16: 3.56x smaller"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(", 0 leaked"), std::string::npos) << r.out;
}

TEST_F(DemoTest, TensorParallelGivesTheSameNumbersAndCacheBytes) {
  const std::string cfg = data("demo_tiny.yaml").string();
  const json one = run_json({"--config", cfg}, "tp1.json");
  const double page_bytes = 2.0 * kHeads * kBlockSize * (kHeadSize / 2 + kHeadSize / 16);
  for (int n : {2, 4}) {
    SCOPED_TRACE("--tensor-parallel " + std::to_string(n));
    const json j = run_json({"--config", cfg, "--tensor-parallel", std::to_string(n)},
                            "tp" + std::to_string(n) + ".json");
    // Every number but the timings, and the cache content hash (cache_fnv1a64) with it.
    EXPECT_EQ(without_sharding(j), without_sharding(one));
    EXPECT_EQ(j["cache_fnv1a64"], one["cache_fnv1a64"]);
    // Head by head: the shards hold exactly the single writer's bytes.
    EXPECT_EQ(head_hashes(j), head_hashes(one));
    ASSERT_EQ(j["shards"].size(), static_cast<std::size_t>(n));
    const int64_t per = kHeads / n;
    for (int i = 0; i < n; ++i) {
      const json& sh = j["shards"][static_cast<std::size_t>(i)];
      EXPECT_EQ(sh["device"], "cpu");
      EXPECT_EQ(sh["kv_heads"], json::array({i * per, (i + 1) * per}));
      EXPECT_EQ(sh["page_bytes"].get<double>(), page_bytes / n);
      EXPECT_EQ(sh["pages_used"], one["pages_used"]);
      EXPECT_EQ(sh["bytes_used"].get<double>(), one["pages_used"].get<double>() * page_bytes / n);
      EXPECT_EQ(sh["cache_bytes"].get<double>(), 48 * page_bytes / n);
    }
  }
  // A hash that can tell: another workload gives other bytes.
  const json other = run_json({"--config", cfg, "--seed", "8"}, "other.json");
  EXPECT_NE(other["cache_fnv1a64"], one["cache_fnv1a64"]);
}

TEST_F(DemoTest, TensorParallelReportAndVerify) {
  const json j =
      run_json({"--config", data("demo_tiny.yaml").string(), "--tensor-parallel", "2", "--verify"});
  EXPECT_EQ(j["verify_differing_bytes"], 0);
  const std::string out = slurp(dir_ / "stdout");
  for (const char* needle :
       {"  shards      2 (tensor parallel), 2 KV heads each, every write issued to all shards "
        "before any is synchronized\n",
        "  shard 0     KV heads 0..1 on cpu (CPU", "  shard 1     KV heads 2..3 on cpu (CPU",
        " x 4608 bytes = ", "(cache 221184 bytes)\n",
        "cache bytes equal to reference_cpu's (442368 bytes compared)"}) {
    EXPECT_NE(out.find(needle), std::string::npos) << "no '" << needle << "' in:\n" << out;
  }
  EXPECT_EQ(out.find("timeline"), std::string::npos);
  // One shard: no shard lines.
  const Outcome r = run({"--config", data("demo_tiny.yaml").string()});
  EXPECT_EQ(r.out.find("  shard"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  cache hash  0x"), std::string::npos) << r.out;
}

TEST_F(DemoTest, TimelineShowsEveryShardsWrites) {
  const json j = run_json(
      {"--config", data("demo_tiny.yaml").string(), "--tensor-parallel", "2", "--timeline"});
  const std::string out = slurp(dir_ / "stdout");
  for (const char* needle :
       {"\ntimeline (host steady clock, us since the run started", " writes to 2 shards: ",
        "\n  shard 0 on cpu: ", "\n  shard 1 on cpu: ", "the 6 largest writes:\n",
        "start_us     issued_us        end_us\n"}) {
    EXPECT_NE(out.find(needle), std::string::npos) << "no '" << needle << "' in:\n" << out;
  }
  ASSERT_TRUE(j.contains("timeline"));
  const json& t = j["timeline"];
  EXPECT_GT(t["writes"].get<int64_t>(), 10);
  EXPECT_EQ(t["shard_busy_s"].size(), 2u);
  EXPECT_GT(t["write_s"].get<double>(), 0.0);
  ASSERT_EQ(t["largest"].size(), 6u);
  int64_t last_index = -1;
  for (const json& w : t["largest"]) {
    EXPECT_GT(w["write"].get<int64_t>(), last_index);  // in the order written
    last_index = w["write"].get<int64_t>();
    ASSERT_EQ(w["shards"].size(), 2u);
    const json& a = w["shards"][0];
    const json& b = w["shards"][1];
    // Each shard: start <= issued <= end; shard 1 issued after shard 0's write() returned and
    // before either was synchronized.
    for (const json* s : {&a, &b}) {
      EXPECT_LE((*s)["start_us"].get<double>(), (*s)["issued_us"].get<double>());
      EXPECT_LE((*s)["issued_us"].get<double>(), (*s)["end_us"].get<double>());
    }
    EXPECT_LE(a["issued_us"].get<double>(), b["start_us"].get<double>());
    EXPECT_LE(b["issued_us"].get<double>(), a["end_us"].get<double>());
    EXPECT_LE(a["end_us"].get<double>(), b["end_us"].get<double>());
  }
}

TEST_F(DemoTest, BadTensorParallelOrDevicesExit2) {
  const std::string cfg = data("demo_tiny.yaml").string();
  for (const char* n : {"3", "0", "-1", "8"}) {
    const Outcome r = run({"--config", cfg, "--tensor-parallel", n});
    EXPECT_EQ(r.status, 2) << n;
    EXPECT_EQ(r.err, std::string("kvq-demo: --tensor-parallel ") + n +
                         ": the 4 KV heads (cache.num_kv_heads) cannot be split into " + n +
                         " equal shards: expected one of 1, 2, 4\n");
    EXPECT_EQ(r.out, "");
  }
  EXPECT_EQ(run({"--config", cfg, "--tensor-parallel", "two"}).status, 2);
  EXPECT_EQ(run({"--config", cfg, "--tensor-parallel", "1.5"}).status, 2);
  // Too large for any integer: refused as written, never echoed as a clamped 9223372036854775807.
  const Outcome huge = run({"--config", cfg, "--tensor-parallel", "99999999999999999999999"});
  EXPECT_EQ(huge.status, 2);
  EXPECT_NE(huge.err.find("99999999999999999999999"), std::string::npos) << huge.err;
  EXPECT_EQ(huge.err.find("9223372036854775807"), std::string::npos) << huge.err;

  Outcome r = run({"--config", cfg, "--tensor-parallel", "2", "--devices", "cpu"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq-demo: --devices: 1 device for --tensor-parallel 2: expected one per shard\n");
  r = run({"--config", cfg, "--tensor-parallel", "2", "--devices", "cpu,gpu1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq-demo: --devices cpu,gpu1: entry 1 is 'gpu1': expected a CUDA ordinal (0, 1, ...), "
            "cuda:N or cpu\n");
  // reference_cpu refuses a GPU: the message says which shard.
  r = run({"--config", cfg, "--tensor-parallel", "2", "--devices", "cpu,1"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(
      r.err.rfind("kvq-demo: shard 1 of 2 (KV heads 2..3, cuda:1): backend 'reference_cpu'", 0), 0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
  // --devices cpu,cpu is what a CPU backend does anyway.
  const json j = run_json({"--config", cfg, "--tensor-parallel", "2", "--devices", "cpu,cpu"});
  EXPECT_EQ(j["shards"].size(), 2u);
}

}  // namespace
