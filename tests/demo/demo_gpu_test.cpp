// kvq-demo on the cuda backend (label gpu). --tensor-parallel (issue 9): the embedded default
// workload (8 KV heads) with 2, 4 and 8 shards gives the same report numbers and the same cache
// bytes, head by head, as one shard, and as reference_cpu (--verify). Shards go on cuda:0,
// cuda:1, ... when the machine has the GPUs; otherwise (one GPU) all on cuda:0 through --devices.
// GPU attention: after each decode write, cuda's attention over the sequences written, timed,
// and on the checked steps close to f32 attention on the original rows; in shards as in one; a
// head_size its kernels are not built for is reported, and the run goes on.
// Skips with kvq-demo's own message only where cuda is unavailable for want of a device (no
// GPU, no driver; a failure under KVQ_REQUIRE_GPU, require_gpu.h); any other exit 2 (bad usage,
// bad config, another reason) is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "demo_process.h"
#include "require_gpu.h"

namespace {

using namespace kvq::demo::test;

// kvq-demo's one line when the cuda plugin's probe finds no CUDA device:
// "kvq-demo: backend 'cuda' (FILE) is unavailable: no CUDA device: REASON".
bool no_cuda_device(const Outcome& r) {
  return r.status == 2 && r.err.rfind("kvq-demo: backend 'cuda' (", 0) == 0 &&
         r.err.find(") is unavailable: no CUDA device: ") != std::string::npos &&
         std::count(r.err.begin(), r.err.end(), '\n') == 1;
}

class DemoGpuTest : public DemoTest {
 protected:
  // kvq-demo --backend cuda --verify --timeline [args] --json FILE; status 0 expected.
  Outcome run_cuda(std::vector<std::string> args, const std::string& json_name) {
    std::vector<std::string> all = {"--backend",  "cuda",   "--verify",
                                    "--timeline", "--json", (dir_ / json_name).string()};
    all.insert(all.end(), args.begin(), args.end());
    return run(all);
  }
  json read(const std::string& json_name) { return json::parse(slurp(dir_ / json_name)); }

  // data/demo_tiny.yaml for cuda (its backend and device lines dropped: --backend cuda gives
  // cuda:0), with `head_size` and the GPU attention checked on every decode step.
  std::string tiny_on_cuda(const std::string& name, int head_size = 128) {
    std::string text = slurp(data("demo_tiny.yaml"));
    for (const std::string line :
         {"backend: reference_cpu\n", "device: cpu\n", "  head_size: 128\n"}) {
      const auto at = text.find(line);
      EXPECT_NE(at, std::string::npos) << line;
      if (at != std::string::npos) text.erase(at, line.size());
    }
    text += "  gpu_attention_check_every: 1\n";  // the demo section is the file's last
    const auto cache = text.find("cache:\n");
    EXPECT_NE(cache, std::string::npos);
    text.insert(cache + 7, "  head_size: " + std::to_string(head_size) + "\n");
    const fs::path file = dir_ / name;
    std::ofstream(file) << text;
    return file.string();
  }
};

// The GPU attention's numbers: one attend per shard per decode step, every checked step's
// output close to f32 attention on the original rows (the host attention's thresholds of
// demo_e2e_test: cosine above 0.99, rel error below 0.15).
void expect_gpu_attention(const json& j, int64_t shards, int64_t check_every) {
  ASSERT_EQ(j["gpu_attention"], true) << j.dump(2);
  EXPECT_FALSE(j.contains("gpu_attention_reason"));
  const int64_t steps = j["gpu_attention_steps"].get<int64_t>();
  EXPECT_EQ(steps, j["decode_writes"].get<int64_t>());
  EXPECT_GT(steps, 0);
  EXPECT_EQ(j["gpu_attention_calls"].get<int64_t>(), steps * shards);
  EXPECT_EQ(j["gpu_attention_check_every"].get<int64_t>(), check_every);
  EXPECT_EQ(j["gpu_attention_checked_steps"].get<int64_t>(),
            (steps + check_every - 1) / check_every);
  const int64_t q_heads = j["cache"]["num_kv_heads"].get<int64_t>() *
                          j["workload"]["query_heads_per_kv_head"].get<int64_t>();
  const int64_t queries = j["gpu_attention_checked_queries"].get<int64_t>();
  EXPECT_GE(queries, j["gpu_attention_checked_steps"].get<int64_t>() * q_heads);
  EXPECT_LE(queries, j["gpu_attention_checked_steps"].get<int64_t>() * q_heads *
                         j["workload"]["max_batch"].get<int64_t>());
  EXPECT_GT(j["gpu_attention_us_per_step"].get<double>(), 0.0);
  EXPECT_GT(j["gpu_attention_seconds"].get<double>(), 0.0);
  EXPECT_NEAR(
      j["gpu_attention_gb_per_s"].get<double>(),
      j["gpu_attention_bytes"].get<double>() / j["gpu_attention_seconds"].get<double>() / 1e9,
      1e-9 * j["gpu_attention_gb_per_s"].get<double>());
  // At least every step's query and output, and one token's K and V per sequence.
  EXPECT_GE(j["gpu_attention_bytes"].get<double>(),
            static_cast<double>(steps) *
                (static_cast<double>(q_heads) * j["cache"]["head_size"].get<double>() * 6 +
                 j["bytes_per_token"].get<double>()));
  EXPECT_GT(j["gpu_attention_cosine"].get<double>(), 0.99);
  EXPECT_GT(j["gpu_attention_rel_error"].get<double>(), 0.0);
  EXPECT_LT(j["gpu_attention_rel_error"].get<double>(), 0.15);
}

TEST_F(DemoGpuTest, TensorParallelEqualsOneShardOnCuda) {
  const Outcome one_run = run_cuda({}, "tp1.json");
  if (no_cuda_device(one_run)) KVQ_NO_CUDA_DEVICE(one_run.err);
  ASSERT_EQ(one_run.status, 0) << one_run.err;
  const json one = read("tp1.json");
  EXPECT_EQ(one["verify_differing_bytes"], 0);
  expect_gpu_attention(one, 1, 16);

  // Two shards on cuda:0 and cuda:1, or both on cuda:0 where there is one GPU.
  Outcome r = run_cuda({"--tensor-parallel", "2"}, "tp2.json");
  bool one_gpu = false;
  if (r.status == 2 && r.err.find("shard 1 of 2 (KV heads 4..7, cuda:1): ") != std::string::npos) {
    one_gpu = true;
    std::cout << "one GPU: " << r.err << "two shards go on cuda:0 (--devices 0,0)\n";
    r = run_cuda({"--tensor-parallel", "2", "--devices", "0,0"}, "tp2.json");
  }
  ASSERT_EQ(r.status, 0) << r.err;
  std::cout << r.out;  // the report with its shard lines and the timeline
  const json two = read("tp2.json");
  EXPECT_EQ(without_sharding(two), without_sharding(one));
  EXPECT_EQ(two["cache_fnv1a64"], one["cache_fnv1a64"]);
  EXPECT_EQ(head_hashes(two), head_hashes(one));
  EXPECT_EQ(two["verify_differing_bytes"], 0);
  expect_gpu_attention(two, 2, 16);
  ASSERT_EQ(two["shards"].size(), 2u);
  EXPECT_EQ(two["shards"][0]["device"], "cuda:0");
  EXPECT_EQ(two["shards"][1]["device"], one_gpu ? "cuda:0" : "cuda:1");
  // The device line names every GPU the shards use.
  EXPECT_EQ(two["device"].get<std::string>().find("(cuda:1,") != std::string::npos, !one_gpu)
      << two["device"];
  const json& t = two["timeline"];
  std::cout << "timeline: " << t["writes"] << " writes, " << t["write_s"] << " s in writes, "
            << t["overlap_s"] << " s with both shards' writes issued and neither finished\n";
  EXPECT_GT(t["overlap_s"].get<double>(), 0.0);

  // 4 and 8 shards: spread over two GPUs when there are two, else all on cuda:0.
  for (const auto& [n, devices] : std::vector<std::pair<std::string, std::string>>{
           {"4", one_gpu ? "0,0,0,0" : "0,0,1,1"},
           {"8", one_gpu ? "0,0,0,0,0,0,0,0" : "0,1,0,1,0,1,0,1"}}) {
    SCOPED_TRACE("--tensor-parallel " + n + " --devices " + devices);
    r = run_cuda({"--tensor-parallel", n, "--devices", devices}, "tp" + n + ".json");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = read("tp" + n + ".json");
    EXPECT_EQ(without_sharding(j), without_sharding(one));
    EXPECT_EQ(head_hashes(j), head_hashes(one));
    EXPECT_EQ(j["verify_differing_bytes"], 0);
    EXPECT_EQ(j["shards"].size(), std::stoul(n));
    // The GPU attention per shard: the same steps, its errors those of one shard up to the f32
    // rounding of how its kernel splits the work.
    expect_gpu_attention(j, std::stoll(n), 16);
    EXPECT_NEAR(j["gpu_attention_rel_error"].get<double>(),
                one["gpu_attention_rel_error"].get<double>(), 1e-5);
    EXPECT_NEAR(j["gpu_attention_cosine"].get<double>(), one["gpu_attention_cosine"].get<double>(),
                1e-6);
  }
}

// The embedded default on cuda: GPU attention after every decode write, its line in the report.
TEST_F(DemoGpuTest, AttentionRunsOnTheGpuAfterEachDecodeWrite) {
  const Outcome r = run({"--backend", "cuda", "--json", (dir_ / "gpu.json").string()});
  if (no_cuda_device(r)) KVQ_NO_CUDA_DEVICE(r.err);
  ASSERT_EQ(r.status, 0) << r.err;
  std::cout << r.out;
  const json j = read("gpu.json");
  expect_gpu_attention(j, 1, 16);
  // The host attention (every sequence at its end, through the reader) still runs.
  EXPECT_GT(j["attention_cosine"].get<double>(), 0.99);
  EXPECT_GT(j["attention_queries"].get<int64_t>(), 0);
  const std::regex line(
      R"(\n  gpu attention (\d+) calls, ([0-9.]+) us per step \(median\), ([0-9.]+) GB/s, rel )"
      R"(error ([0-9.]+), cosine ([0-9.]+) over (\d+) sampled steps \((\d+) queries, 1 step in )"
      R"(16\): )");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
  EXPECT_EQ(std::stoll(m[1]), j["gpu_attention_calls"].get<int64_t>());
  EXPECT_NEAR(std::stod(m[2]), j["gpu_attention_us_per_step"].get<double>(), 0.051);
  EXPECT_GT(std::stod(m[5]), 0.99);
  EXPECT_EQ(std::stoll(m[6]), j["gpu_attention_checked_steps"].get<int64_t>());
  EXPECT_EQ(std::stoll(m[7]), j["gpu_attention_checked_queries"].get<int64_t>());
  EXPECT_EQ(r.out.find("gpu attention none"), std::string::npos) << r.out;
}

// Every step checked, on one shard and on two (cuda:0 and cuda:1, or both on cuda:0): the same
// steps and queries, errors equal up to f32 rounding.
TEST_F(DemoGpuTest, AttentionInShardsCheckedOnEveryStep) {
  const std::string cfg = tiny_on_cuda("tiny_cuda.yaml");
  const Outcome first =
      run({"--config", cfg, "--backend", "cuda", "--json", (dir_ / "one.json").string()});
  if (no_cuda_device(first)) KVQ_NO_CUDA_DEVICE(first.err);
  ASSERT_EQ(first.status, 0) << first.err;
  const json one = read("one.json");
  expect_gpu_attention(one, 1, 1);
  EXPECT_NE(first.out.find("sampled steps (" +
                           std::to_string(one["gpu_attention_checked_queries"].get<int64_t>()) +
                           " queries, every step): "),
            std::string::npos)
      << first.out;

  std::vector<std::string> args = {
      "--config",          cfg, "--backend", "cuda",
      "--tensor-parallel", "2", "--json",    (dir_ / "two.json").string()};
  Outcome r = run(args);
  if (r.status == 2 && r.err.find("shard 1 of 2 (KV heads 2..3, cuda:1): ") != std::string::npos) {
    std::cout << "one GPU: both shards on cuda:0\n";
    args.insert(args.end(), {"--devices", "0,0"});
    r = run(args);
  }
  ASSERT_EQ(r.status, 0) << r.err;
  std::cout << r.out;
  const json two = read("two.json");
  expect_gpu_attention(two, 2, 1);
  EXPECT_EQ(without_sharding(two), without_sharding(one));
  EXPECT_NEAR(two["gpu_attention_rel_error"].get<double>(),
              one["gpu_attention_rel_error"].get<double>(), 1e-5);
  EXPECT_NEAR(two["gpu_attention_cosine"].get<double>(), one["gpu_attention_cosine"].get<double>(),
              1e-6);
  const std::string steps = std::to_string(two["gpu_attention_steps"].get<int64_t>());
  EXPECT_NE(
      r.out.find("  gpu attention " + std::to_string(two["gpu_attention_calls"].get<int64_t>()) +
                 " calls (" + steps + " decode steps x 2 shards), "),
      std::string::npos)
      << r.out;
}

// Long sequences (32 KV heads, prompts of 4096..8192 tokens, 8 at once): a full batch may fill
// the GPU without splitting while the last sequences, decoding alone, are split, in the one
// workspace allocated for the full batch.
TEST_F(DemoGpuTest, LongSequencesAttendOnTheGpu) {
  const Outcome r = run({"--config", data("demo_tp_large.yaml").string(), "--backend", "cuda",
                         "--json", (dir_ / "large.json").string()});
  if (no_cuda_device(r)) KVQ_NO_CUDA_DEVICE(r.err);
  ASSERT_EQ(r.status, 0) << r.err;
  std::cout << r.out;
  expect_gpu_attention(read("large.json"), 1, 16);
}

// A head_size cuda's attention kernels are not built for: the writes and the host attention run,
// and the report says why the GPU attention did not.
TEST_F(DemoGpuTest, AHeadSizeTheAttentionRefusesIsReported) {
  const Outcome r = run({"--config", tiny_on_cuda("tiny_192.yaml", 192), "--backend", "cuda",
                         "--json", (dir_ / "h192.json").string()});
  if (no_cuda_device(r)) KVQ_NO_CUDA_DEVICE(r.err);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = read("h192.json");
  EXPECT_EQ(j["gpu_attention"], false);
  const std::string reason = j["gpu_attention_reason"].get<std::string>();
  EXPECT_EQ(reason.rfind("backend cuda's attention refuses this run: ", 0), 0u) << reason;
  EXPECT_NE(reason.find("head_size 192: expected 64, 128 or 256"), std::string::npos) << reason;
  EXPECT_NE(r.out.find("  gpu attention none: " + reason +
                       "; attention is measured on the host "
                       "only (above)\n"),
            std::string::npos)
      << r.out;
  EXPECT_GT(j["attention_cosine"].get<double>(), 0.99);
}

TEST_F(DemoGpuTest, AGpuThatDoesNotExistExits2) {
  const Outcome r = run({"--backend", "cuda", "--tensor-parallel", "2", "--devices", "0,4096"});
  if (no_cuda_device(r)) KVQ_NO_CUDA_DEVICE(r.err);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err.rfind("kvq-demo: shard 1 of 2 (KV heads 4..7, cuda:4096): ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("cuda:4096"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
