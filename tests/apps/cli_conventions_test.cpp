// The conventions every kvq program shares, run as a user runs them: --help of each program and
// subcommand names --plugin-path, --log-level, --version, the exit statuses and the environment
// variables, with FILE/DIR metavars; `backend: auto` is quiet; kvq check resolves auto; kvq read
// --compare and kvq calibrate print their figures; examples/make_kv.py parses its arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvq/core/bf16.h"
#include "kvq/core/version.h"
#include "kvq/io/safetensors.h"
#include "kvq_cli_fixture.h"

namespace kvq {
namespace {
namespace fs = std::filesystem;
using test::slurp;

class CliConventions : public test::KvqCliTest {
 protected:
  // `kvq-demo ARGS`, beside bin/kvq.
  test::CliResult demo(const std::string& args) const {
    const std::string cmd = (kvq_.parent_path() / "kvq-demo").string() + " " + args + " >" +
                            path("stdout") + " 2>" + path("stderr");
    const int raw = std::system(cmd.c_str());
    test::CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(dir_ / "stdout");
    r.err = slurp(dir_ / "stderr");
    return r;
  }
  std::string config(const std::string& name) const {
    return (source_ / "configs" / name).string();
  }
  // key, value [T, 8, 128] bf16 (N(0, 1), key[0][0][0] = `peak`) and slot_mapping 0..T-1.
  std::string make_input(int64_t T, float peak) const {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<uint16_t> key(static_cast<size_t>(T * 8 * 128)), value(key.size());
    for (auto& x : key) x = float_to_bf16(normal(rng));
    for (auto& x : value) x = float_to_bf16(0.5f * normal(rng));
    key[0] = float_to_bf16(peak);
    std::vector<int64_t> slots(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) slots[static_cast<size_t>(t)] = t;
    const std::string file = path("kv.safetensors");
    save_safetensors(file, {{"key", make_view(key.data(), DType::bf16, {T, 8, 128})},
                            {"value", make_view(value.data(), DType::bf16, {T, 8, 128})},
                            {"slot_mapping", make_view(slots.data(), DType::i64, {T})}});
    return file;
  }
};

void expect_shared_help(const test::CliResult& r, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* s :
       {"--plugin-path DIR", "--log-level LEVEL", "--version",
        "Exit status: 0 success, 1 runtime failure, 2 bad usage, bad config or bad input file",
        "KVQ_LOG_LEVEL (trace|debug|info|warn|error|off)", "KVQ_PLUGIN_PATH"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " in\n" << r.out;
  }
  EXPECT_EQ(r.out.find("NON-EMPTY"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("TEXT"), std::string::npos) << "a metavar says TEXT:\n" << r.out;
}

TEST_F(CliConventions, EveryHelpNamesTheSharedOptionsExitStatusesAndEnvironment) {
  for (const char* sub : {"backends", "check", "layout", "write", "read", "bench", "calibrate"}) {
    expect_shared_help(kvq(std::string(sub) + " --help"), std::string("kvq ") + sub);
  }
  const test::CliResult d = demo("--help");
  expect_shared_help(d, "kvq-demo");
  EXPECT_NE(d.out.find("--config FILE"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("128+N interrupted by signal N"), std::string::npos) << d.out;
  const test::CliResult top = kvq("--help");
  EXPECT_EQ(top.status, 0);
  EXPECT_NE(top.out.find("--plugin-path DIR, --log-level LEVEL and --version"), std::string::npos)
      << top.out;
  EXPECT_NE(top.out.find("Exit status: 0 success"), std::string::npos) << top.out;
  const test::CliResult write = kvq("write --help");
  EXPECT_NE(write.out.find("CONFIG FILE REQUIRED"), std::string::npos) << write.out;
  EXPECT_NE(write.out.find("--input FILE REQUIRED"), std::string::npos) << write.out;
}

TEST_F(CliConventions, VersionEverywhere) {
  for (const std::string args : {"--version", "write --version", "calibrate --version"}) {
    const test::CliResult r = kvq(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_EQ(r.out, std::string(KVQ_VERSION_STRING) + "\n") << args;
  }
  const test::CliResult d = demo("--version");
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(d.out, std::string(KVQ_VERSION_STRING) + "\n");
}

TEST_F(CliConventions, LogLevelFlagWinsOverTheEnvironmentAndIsChecked) {
  const test::CliResult r =
      kvq("check " + config("reference_cpu.yaml") + " --log-level debug", "KVQ_LOG_LEVEL=off ");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("[kvq] [debug] backend reference_cpu"), std::string::npos) << r.err;
  const test::CliResult bad = kvq("check " + config("reference_cpu.yaml") + " --log-level loud");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("expected trace, debug, info, warn, error or off, found 'loud'"),
            std::string::npos)
      << bad.err;
  const test::CliResult demo_bad = demo("--log-level loud");
  EXPECT_EQ(demo_bad.status, 2) << demo_bad.err;
}

TEST_F(CliConventions, PluginPathIsTakenEverywhereAndChecked) {
  const test::CliResult missing =
      kvq("check " + config("reference_cpu.yaml") + " --plugin-path " + path("nowhere"));
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "kvq: --plugin-path " + path("nowhere") + ": no such file or folder\n");
  // The build's own plugin folder again: found once (a file is loaded once however it is named).
  const std::string plugins =
      (kvq_.parent_path().parent_path() / "lib" / "kvq" / "plugins").string();
  const std::string input = make_input(16, 1.0f);
  const test::CliResult w =
      kvq("write " + config("reference_cpu.yaml") + " --input " + input + " --output " +
          path("cache.safetensors") + " --plugin-path " + plugins);
  EXPECT_EQ(w.status, 0) << w.err;
  const test::CliResult d = demo("--plugin-path " + path("nowhere"));
  EXPECT_EQ(d.status, 2);
  EXPECT_EQ(d.err, "kvq-demo: --plugin-path " + path("nowhere") + ": no such file or folder\n");
}

// backend auto: nothing on stderr when the best plugin is available, one short line when another
// was passed over; the reasons at debug level.
TEST_F(CliConventions, AutoFallbackIsOneShortLine) {
  const std::string input = make_input(16, 1.0f);
  const test::CliResult r = kvq("write " + config("nvfp4_sm100.yaml") + " --input " + input +
                                    " --output " + path("cache.safetensors"),
                                "unset KVQ_LOG_LEVEL; ");
  ASSERT_EQ(r.status, 0) << r.err;
  if (!r.err.empty()) {
    EXPECT_EQ(r.err.rfind("[kvq] [info] backend auto: using ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(r.err.size(), 120u) << r.err;
    const test::CliResult debug =
        kvq("write " + config("nvfp4_sm100.yaml") + " --input " + input + " --output " +
            path("cache.safetensors") + " --log-level debug");
    EXPECT_NE(debug.err.find(" unavailable: "), std::string::npos) << debug.err;
  }
}

// kvq check resolves auto as write does: with device cuda:0 where auto picks reference_cpu, the
// check fails as the write would.
TEST_F(CliConventions, CheckResolvesAutoAndChecksTheDevice) {
  const test::CliResult ok = kvq("check " + config("nvfp4_sm100.yaml"));
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("backend auto: "), std::string::npos) << ok.out;
  if (ok.out.find("backend auto: reference_cpu here") == std::string::npos) {
    GTEST_SKIP() << "auto picks a GPU backend here: " << ok.out;
  }
  std::string text = slurp(source_ / "configs" / "nvfp4_sm100.yaml");
  text.replace(text.find("device: auto"), 12, "device: cuda:0");
  std::ofstream(path("cuda.yaml")) << text;
  const test::CliResult r = kvq("check " + path("cuda.yaml"));
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(path("cuda.yaml") + ":"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuda:0"), std::string::npos) << r.err;
}

TEST_F(CliConventions, ReadCompareprintsAndWritesTheErrors) {
  const std::string input = make_input(40, 1.0f);
  const std::string cfg = config("reference_cpu.yaml");
  ASSERT_EQ(kvq("write " + cfg + " --input " + input + " --output " + path("c.safetensors")).status,
            0);
  const test::CliResult r =
      kvq("read " + cfg + " --cache " + path("c.safetensors") + " --slot-mapping " + input +
          " --output " + path("back.safetensors") + " --compare " + input + " --json " +
          path("errors.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("  vs " + input + " (40960 elements a side):\n  K  relative error 0.0"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n  V  relative error 0.0"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(dir_ / "errors.json"));
  for (const char* side : {"key", "value"}) {
    EXPECT_GT(j[side]["relative_error"].get<double>(), 0.05) << side;
    EXPECT_LT(j[side]["relative_error"].get<double>(), 0.15) << side;
    EXPECT_GT(j[side]["max_error"].get<double>(), 0.0) << side;
    EXPECT_EQ(j[side]["elements"], 40960) << side;
  }
  // --json needs --compare.
  EXPECT_EQ(kvq("read " + cfg + " --cache " + path("c.safetensors") + " --slot-mapping " + input +
                " --output " + path("back.safetensors") + " --json " + path("x.json"))
                .status,
            2);
}

// NVFP4's rule amax / 2688, next to the FP8 rule amax / 448 and the config's; per head too.
TEST_F(CliConventions, CalibratePrintsTheNvfp4ScalesAndTheirErrors) {
  const std::string input = make_input(32, 12.0f);
  const test::CliResult r = kvq("calibrate " + config("reference_cpu.yaml") + " --input " + input +
                                " --json " + path("cal.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("k_scale (amax 12)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nvfp4: amax / 2688"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp8: amax / 448"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  k_scale: 0.00446429\n"), std::string::npos) << r.out;  // 12 / 2688
  const auto j = nlohmann::json::parse(slurp(dir_ / "cal.json"));
  EXPECT_FLOAT_EQ(j["key"]["scale"].get<float>(), 12.0f / 2688.0f);
  EXPECT_FLOAT_EQ(j["key"]["conventions"][1]["scale"].get<float>(), 12.0f / 448.0f);
  EXPECT_EQ(j["key"]["per_head"].size(), 8u);
  // Head 0 holds the peak; the others' amax is that of N(0, 1) rows.
  EXPECT_FLOAT_EQ(j["key"]["per_head"][0]["scale"].get<float>(), 12.0f / 2688.0f);
  EXPECT_LT(j["key"]["per_head"][1]["amax"].get<double>(), 6.0);
  for (const char* side : {"key", "value"}) {
    EXPECT_GT(j[side]["relative_error"].get<double>(), 0.0) << side;
    EXPECT_LT(j[side]["relative_error"].get<double>(), 0.2) << side;
  }
}

TEST_F(CliConventions, MakeKvParsesItsArguments) {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << "no /usr/bin/python3 with numpy (scripts/install-deps.sh installs it)";
  }
  const std::string script = (source_ / "examples" / "make_kv.py").string();
  const auto run = [&](const std::string& args) {
    return std::system(("cd " + dir_.string() + " && /usr/bin/python3 " + script + " " + args +
                        " >out.txt 2>err.txt")
                           .c_str());
  };
  EXPECT_EQ(run("--help"), 0);
  EXPECT_NE(slurp(dir_ / "out.txt").find("--dtype {bf16,f16,f32}"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "--help"));
  EXPECT_NE(run("x.safetensors --tokens 0"), 0);
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
  ASSERT_EQ(run("a.safetensors --tokens 5 --heads 2 --head-size 64 --seed 3"), 0);
  const SafetensorsFile a = SafetensorsFile::load(dir_ / "a.safetensors");
  EXPECT_EQ(a.at("key").dtype, DType::bf16);  // the default
  EXPECT_EQ(a.at("key").shape, (std::vector<int64_t>{5, 2, 64}));
  EXPECT_EQ(a.at("slot_mapping").shape, (std::vector<int64_t>{5}));
  ASSERT_EQ(run("b.safetensors --dtype f16"), 0);
  const SafetensorsFile b = SafetensorsFile::load(dir_ / "b.safetensors");
  EXPECT_EQ(b.at("value").dtype, DType::f16);
  EXPECT_EQ(b.at("value").shape, (std::vector<int64_t>{64, 8, 128}));
}

}  // namespace
}  // namespace kvq
