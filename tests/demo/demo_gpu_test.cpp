// kvq-demo --tensor-parallel on the cuda backend (label gpu; issue 9): the embedded default
// workload (8 KV heads) with 2, 4 and 8 shards gives the same report numbers and the same cache
// bytes, head by head, as one shard, and as reference_cpu (--verify). Shards go on cuda:0,
// cuda:1, ... when the machine has the GPUs; otherwise (one GPU) all on cuda:0 through --devices.
// Skips with kvq-demo's own message only where cuda is unavailable for want of a device (no
// GPU, no driver; a failure under KVQ_REQUIRE_GPU, require_gpu.h); any other exit 2 (bad usage,
// bad config, another reason) is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
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
};

TEST_F(DemoGpuTest, TensorParallelEqualsOneShardOnCuda) {
  const Outcome one_run = run_cuda({}, "tp1.json");
  if (no_cuda_device(one_run)) KVQ_NO_CUDA_DEVICE(one_run.err);
  ASSERT_EQ(one_run.status, 0) << one_run.err;
  const json one = read("tp1.json");
  EXPECT_EQ(one["verify_differing_bytes"], 0);

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
  }
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
