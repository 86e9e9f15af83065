// `kvq bench` end to end with the reference_cpu plugin: a tiny sweep whose JSON must hold every
// key with positive numbers, its exit statuses, and --plot when matplotlib is there; the same for
// `kvq bench --attention`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kvq_cli_fixture.h"

namespace {
namespace fs = std::filesystem;
using kvq::test::slurp;

class BenchCli : public kvq::test::KvqCliTest {
 protected:
  void SetUp() override {
    KvqCliTest::SetUp();
    config_ = source_ / "configs" / "reference_cpu.yaml";
  }
  kvq::test::CliResult bench(const std::string& args) const { return kvq("bench " + args); }

  fs::path config_;
};

// "[3/8] H=" (GCC 12 warns falsely about "[" + std::string).
std::string fmt_progress(int i) {
  std::string s = "[";
  s += std::to_string(i);
  s += "/8] H=";
  return s;
}

void expect_timing(const nlohmann::json& t, int iterations, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["iterations"], iterations);
  for (const char* k : {"median", "min", "max"}) EXPECT_GT(t["ms"][k].get<double>(), 0) << k;
  EXPECT_LE(t["ms"]["min"].get<double>(), t["ms"]["median"].get<double>());
  EXPECT_LE(t["ms"]["median"].get<double>(), t["ms"]["max"].get<double>());
  EXPECT_EQ(t["samples_ms"].size(), static_cast<size_t>(iterations));
  EXPECT_GT(t["gbps"].get<double>(), 0);
  EXPECT_GT(t["percent_of_copy"].get<double>(), 0);
  EXPECT_GT(t["bytes"]["read"].get<uint64_t>(), 0u);
  EXPECT_GT(t["bytes"]["written"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["bytes"]["total"].get<uint64_t>(),
            t["bytes"]["read"].get<uint64_t>() + t["bytes"]["written"].get<uint64_t>());
  // Issue 7's count (every row, padding included) is never below the least bytes, and the
  // percentages scale with it.
  const double all_rows = t["bytes"]["all_rows_total"].get<double>();
  const double least = t["bytes"]["total"].get<double>();
  EXPECT_GE(all_rows, least);
  EXPECT_NEAR(t["percent_of_copy_all_rows"].get<double>(),
              t["percent_of_copy"].get<double>() * all_rows / least,
              1e-9 * t["percent_of_copy_all_rows"].get<double>());
  EXPECT_GE(t["sets"].get<int64_t>(), 2);
  // CPU: no graph replay, and the JSON says why.
  EXPECT_TRUE(t["graph"].is_null());
  EXPECT_FALSE(t["graph_note"].get<std::string>().empty());
}

TEST_F(BenchCli, TinyReferenceCpuSweepKeepsEveryNumber) {
  const fs::path json = dir_ / "bench.json";
  const kvq::test::CliResult r =
      bench(config_.string() +
            " --shapes 8x128x16,1x64 --tokens 1,20 --threads 1,2 --iterations 3 "
            "--json " +
            json.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto doc = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(doc["tool"], "kvq bench");
  EXPECT_EQ(doc["complete"], true);
  EXPECT_FALSE(doc["date"].get<std::string>().empty());
  EXPECT_EQ(doc["config"]["backend"], "reference_cpu");
  EXPECT_EQ(doc["config"]["layout"]["order"], "HND");
  EXPECT_EQ(doc["config"]["layout"]["v_scales"], "sm100_swizzled");
  EXPECT_EQ(doc["device"]["id"], "cpu");
  EXPECT_FALSE(doc["device"]["name"].get<std::string>().empty());
  EXPECT_EQ(doc["copy_bandwidth"]["bytes"], 256u << 20);
  EXPECT_GT(doc["copy_bandwidth"]["gbps"].get<double>(), 0);
  EXPECT_TRUE(doc["settings"]["fused_qkv_query_heads"].is_null()) << "K and V apart by default";

  // 8x128 at block size 16, 1x64 at the default 16; T 1 and 20; threads 1 and 2.
  const auto& cases = doc["cases"];
  ASSERT_EQ(cases.size(), 8u);
  EXPECT_EQ(cases[0]["shape"], (nlohmann::json{{"num_kv_heads", 8}, {"head_size", 128}}));
  EXPECT_EQ(cases[0]["threads"], 1);
  EXPECT_EQ(cases[1]["threads"], 2);
  EXPECT_EQ(cases[2]["tokens"], 20);
  EXPECT_EQ(cases[2]["valid_tokens"], 19);  // 5% of 20 padded
  EXPECT_EQ(cases[2]["padding_tokens"], 1);
  EXPECT_EQ(cases[4]["shape"]["head_size"], 64);
  EXPECT_EQ(cases[4]["block_size"], 16);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_TRUE(c["error"].is_null()) << c["error"];
    EXPECT_GT(c["page_bytes"].get<uint64_t>(), 0u);
    expect_timing(c["write"], 3, "write case " + std::to_string(i));
    expect_timing(c["read"], 3, "read case " + std::to_string(i));
  }
  // One progress line per case on stderr, and a table row per case on stdout.
  for (int i = 1; i <= 8; ++i) {
    const std::string prefix = fmt_progress(i);
    EXPECT_NE(r.err.find(prefix), std::string::npos) << prefix << " in\n" << r.err;
  }
  EXPECT_NE(r.out.find("copy bandwidth:"), std::string::npos) << r.out;
}

// --fused-qkv: the writer and reader take views of one fused QKV buffer; the JSON, the command and
// the table say so.
TEST_F(BenchCli, FusedQkvInputsAreTimedAndRecorded) {
  const fs::path json = dir_ / "fused.json";
  const kvq::test::CliResult r = bench(config_.string() +
                                       " --shapes 2x64x16 --tokens 20 --threads 1 --iterations 3 "
                                       "--fused-qkv 6 --json " +
                                       json.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto doc = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(doc["settings"]["fused_qkv_query_heads"], 6);
  EXPECT_NE(doc["command"].get<std::string>().find(" --fused-qkv 6"), std::string::npos);
  ASSERT_EQ(doc["cases"].size(), 1u);
  EXPECT_TRUE(doc["cases"][0]["error"].is_null()) << doc["cases"][0]["error"];
  expect_timing(doc["cases"][0]["write"], 3, "fused write");
  EXPECT_NE(r.out.find("inputs: K and V views of a fused QKV output, [T, (6 + 2H) x D]"),
            std::string::npos)
      << r.out;
}

TEST_F(BenchCli, BadShapesIsAUsageErrorOnOneLine) {
  const kvq::test::CliResult r = bench(config_.string() + " --shapes 8by128");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq: --shapes: expected HEADSxHEAD_SIZE or HEADSxHEAD_SIZExBLOCK_SIZE items (e.g. "
            "8x128,1x128x64), found '8by128'\n");
}

TEST_F(BenchCli, UnwritableJsonFailsBeforeTiming) {
  const fs::path json = dir_ / "no" / "x.json";
  const kvq::test::CliResult r = bench(config_.string() + " --tokens 1 --json " + json.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq: --json " + json.string() + ": no such folder " + (dir_ / "no").string() + "\n");
}

// Bad values are usage errors before any case runs, and leave an existing --json as it was.
TEST_F(BenchCli, BadValuesFailBeforeTimingAndTouchNothing) {
  const fs::path json = dir_ / "kept.json";
  std::ofstream(json) << "{\"precious\": 1}";
  const auto refused = [&](const std::string& args, const std::string& err) {
    const kvq::test::CliResult r =
        bench(config_.string() + " --json " + json.string() + " " + args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err, "kvq: " + err + "\n") << args;
    EXPECT_EQ(slurp(json), "{\"precious\": 1}") << args;
  };
  refused("--tokens 1 --threads 4294967297",
          "--threads: expected a comma-separated list of integers in [1, 4096], found "
          "'4294967297' in '4294967297'");
  // T past 2^31 - 1 (bench_plan.h, kMaxTokens), here one whose 5% padding overflowed 64 bits.
  refused("--tokens 1,2000000000000000000 --threads 1 --shapes 1x64x16 --iterations 1",
          "--tokens: expected a comma-separated list of integers in [1, 2147483647], found "
          "'2000000000000000000' in '1,2000000000000000000'");
  refused("--tokens 1 --threads 1 --shapes 8x100",
          "--shapes: 8x100x16 (heads x head_size x block_size): head_size must be a multiple of 16 "
          "(one NVFP4 scale per 16 elements), found 100");
  refused("--tokens 1 --threads 1 --shapes 8x128x6",
          "--shapes: 8x128x6 (heads x head_size x block_size): V scales sm100_swizzled need "
          "block_size % 4 == 0 (whole 4-token blocks); found block_size 6");
  refused("--tokens 1 --threads 1 --shapes 8x128x16x9",
          "--shapes: expected HEADSxHEAD_SIZE or HEADSxHEAD_SIZExBLOCK_SIZE items (e.g. "
          "8x128,1x128x64), found '8x128x16x9'");
  refused("--tokens 1 --threads 1 --iterations 0",
          "--iterations: Value 0 not in range 1 to 1000000 (try --help)");
  refused("--tokens 1 --threads 1 --fused-qkv 1025",
          "--fused-qkv: Value 1025 not in range 0 to 1024 (try --help)");
  refused("--tokens 1 --threads 1 --fused-qkv -1",
          "--fused-qkv: Value -1 not in range 0 to 1024 (try --help)");
  refused("--tokens 1 --threads 1 --plot " + (dir_ / "p.xyz").string(),
          "--plot: expected a file name ending in .png, found '" + (dir_ / "p.xyz").string() + "'");
  refused("--tokens 1 --threads 1 --plot " + (dir_ / "p").string(),
          "--plot: expected a file name ending in .png, found '" + (dir_ / "p").string() + "'");
  EXPECT_FALSE(fs::exists(dir_ / "p.png"));
  const kvq::test::CliResult r =
      bench(config_.string() + " --json " + json.string() + " --backend no_such_backend");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(slurp(json), "{\"precious\": 1}");
}

// Nor does the config share a file with an output: refused before any timing, the YAML kept.
TEST_F(BenchCli, AnOutputOverTheConfigIsRefused) {
  const fs::path config = dir_ / "bench.yaml";
  fs::copy_file(config_, config);
  const std::string before = slurp(config);
  const kvq::test::CliResult r =
      bench(config.string() + " --tokens 1 --threads 1 --json " + config.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq: --json " + config.string() + ": is the CONFIG file: expected a different file\n");
  EXPECT_EQ(slurp(config), before);
}

// The numbers and the picture never share a file: the picture would overwrite the numbers.
TEST_F(BenchCli, JsonAndPlotOnOneFileIsRefused) {
  const fs::path png = dir_ / "same.png";
  const kvq::test::CliResult r =
      bench(config_.string() + " --tokens 1 --threads 1 --json " + png.string() + " --plot " +
            (dir_ / "." / "same.png").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "kvq: --plot " + (dir_ / "." / "same.png").string() +
                       ": is the --json file: expected a different file\n");
  EXPECT_FALSE(fs::exists(png));
}

// A case that fails (here one whose cache, two pages of 1.2 GB, the process may not allocate) is
// reported in the table and the JSON, and the run exits 1, not 0: a script must not take a
// sweep with holes for a whole one. The bench allocates its buffers through the runtime, with a
// nothrow new: under a 1.5 GB address-space limit it returns null; under AddressSanitizer (which
// needs the address space for its shadow) the allocator's own size limit does the same.
TEST_F(BenchCli, AFailedCaseExitsOne) {
  const fs::path json = dir_ / "failed.json";
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit = "ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1024 ";
#else
  const std::string limit = "ulimit -v 1500000; ";
#endif
  const kvq::test::CliResult r = kvq(
      "bench " + config_.string() +
          " --shapes 1x16777216x64 --tokens 1 --threads 1 --iterations 3 --json " + json.string(),
      limit);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("\nkvq bench: 1 of 1 cases failed\n"), std::string::npos) << r.err;
  const auto doc = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(doc["cases"].size(), 1u);
  EXPECT_EQ(doc["cases"][0]["error"].get<std::string>().rfind("allocating caches (", 0), 0u)
      << doc["cases"][0]["error"];
}

// --plot without --json keeps its numbers in PLOT.json: when that name cannot be written (here a
// folder holds it) the run stops before timing, exit 2. A stand-in python3 that passes the
// matplotlib check gets the run that far on machines without matplotlib.
TEST_F(BenchCli, UnwritablePlotJsonFailsBeforeTiming) {
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "python3") << "#!/bin/sh\nexit 0\n";
  fs::permissions(bin / "python3", fs::perms::owner_all);
  fs::create_directories(dir_ / "bench.json");
  const fs::path png = dir_ / "bench.png";
  const kvq::test::CliResult r =
      kvq("bench " + config_.string() + " --shapes 1x64x16 --tokens 1 --threads 1 --plot " +
              png.string(),
          "PATH=" + bin.string() + ":\"$PATH\" ");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err, "kvq: --plot's JSON " + (dir_ / "bench.json").string() +
                       ": is a folder: expected a file path\n");
  EXPECT_FALSE(fs::exists(png));
}

// A run cut short keeps the cases it finished: with --plot and no --json too, in PLOT.json,
// marked incomplete. SIGTERM goes out once the first case's progress line is on stderr (printed
// after its numbers are on disk), while the second (512Ki tokens on the CPU: seconds) runs.
TEST_F(BenchCli, AnInterruptedPlotRunKeepsItsFinishedCases) {
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "python3") << "#!/bin/sh\nexit 0\n";  // passes the matplotlib check
  fs::permissions(bin / "python3", fs::perms::owner_all);
  const std::string cmd =
      "PATH=" + bin.string() + ":\"$PATH\" " + kvq_.string() + " bench " + config_.string() +
      " --shapes 1x64x16 --tokens 1,524288 --threads 1 --iterations 3 --plot " + path("bench.png") +
      " >" + path("stdout") + " 2>" + path("stderr") +
      " & pid=$!; i=0; while ! grep -q '^\\[1/2\\]' " + path("stderr") +
      "; do sleep 0.05; i=$((i+1)); [ $i -gt 2400 ] && break; done; kill -TERM $pid; wait $pid";
  ASSERT_NE(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(fs::exists(dir_ / "bench.json")) << slurp(dir_ / "stderr");
  const auto doc = nlohmann::json::parse(slurp(dir_ / "bench.json"));
  EXPECT_EQ(doc["complete"], false);
  ASSERT_EQ(doc["cases"].size(), 1u);
  EXPECT_EQ(doc["cases"][0]["tokens"], 1);
  EXPECT_FALSE(fs::exists(dir_ / "bench.json.tmp"));
}

// Whether a python3 kvq tries (python3 on PATH, then /usr/bin/python3) imports matplotlib as
// plot_bench.py does; not the script under test, whose breakage must fail a test, not skip it.
bool have_matplotlib() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(python) +
                            " -c 'import matplotlib; matplotlib.use(\"Agg\"); "
                            "import matplotlib.pyplot' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return true;
  }
  return false;
}

bool is_png(const std::string& bytes) {
  return bytes.size() > 1000 && bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}

TEST_F(BenchCli, PlotDrawsAPng) {
  if (!have_matplotlib()) GTEST_SKIP() << "no python3 with matplotlib (scripts/install-deps.sh)";
  const fs::path png = dir_ / "bench.png";
  const kvq::test::CliResult r = bench(config_.string() +
                                       " --shapes 1x64x16 --tokens 1,16 --threads 1 "
                                       "--iterations 3 --plot " +
                                       png.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(is_png(slurp(png)));
  EXPECT_TRUE(fs::exists(dir_ / "bench.json")) << "--plot without --json keeps its JSON beside";
}

// The attention sweep on the host's reference attention: every case of the grid in the table and
// the JSON, with positive numbers.
TEST_F(BenchCli, AttentionSweepKeepsEveryCase) {
  const fs::path json = dir_ / "attention.json";
  const kvq::test::CliResult r =
      bench(config_.string() +
            " --attention --seqs 1,2 --contexts 16,40 --gqa 1,4 --formats bf16,nvfp4 "
            "--iterations 1 --json " +
            json.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("decode attention, copy bandwidth"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(doc["kind"], "attention");
  EXPECT_EQ(doc["backend"], "reference_cpu");
  EXPECT_NE(doc["command"].get<std::string>().find(
                " --attention --seqs 1,2 --contexts 16,40 --gqa 1,4 --formats bf16,nvfp4"),
            std::string::npos)
      << doc["command"];
  EXPECT_GT(doc["copy_gbps"].get<double>(), 0);
  ASSERT_EQ(doc["cases"].size(), 16u);
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c.dump());
    EXPECT_FALSE(c.contains("error"));
    EXPECT_GT(c["bytes"].get<uint64_t>(), c["cache_bytes"].get<uint64_t>() / 1024);
    EXPECT_GT(c["direct_us"].get<double>(), 0);
    EXPECT_GT(c["gbps"].get<double>(), 0);
    EXPECT_GT(c["percent_of_copy"].get<double>(), 0);
  }
}

TEST_F(BenchCli, AttentionRefusesAnUnknownFormatBeforeTiming) {
  const kvq::test::CliResult r = bench(config_.string() +
                                       " --attention --seqs 1 --contexts 16 --formats bf16,nope "
                                       "--json " +
                                       (dir_ / "a.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "kvq: --formats: 'nope' in 'bf16,nope': expected a comma-separated list of nvfp4, "
            "fp8_e4m3, fp8_e5m2, bf16\n");
  EXPECT_FALSE(fs::exists(dir_ / "a.json"));
}

TEST_F(BenchCli, AttentionPlotDrawsAPng) {
  if (!have_matplotlib()) GTEST_SKIP() << "no python3 with matplotlib (scripts/install-deps.sh)";
  const fs::path png = dir_ / "attention.png";
  const kvq::test::CliResult r = bench(config_.string() +
                                       " --attention --seqs 1 --contexts 16,40 --gqa 4 "
                                       "--formats bf16 --iterations 1 --plot " +
                                       png.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(is_png(slurp(png)));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "attention.json"))["kind"], "attention")
      << "--plot without --json keeps its JSON beside";
}

}  // namespace
