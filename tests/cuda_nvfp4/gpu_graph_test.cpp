// A write captured into a CUDA graph and replayed gives the bytes of a direct launch; with scales
// by device pointer, replays pick up new scale values without re-capture.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gpu_test_support.h"

namespace kvq::cuda_nvfp4::test {
namespace {

class Stream {
 public:
  Stream() {
    check_cuda(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~Stream() { (void)cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

TEST(GpuGraph, CapturedWriteReplaysToTheSameBytesAsADirectLaunch) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(77);
  for (int i = 0; i < 6; ++i) {
    WriteCase c = random_case(rng, i * 9);
    c.device_scales = i % 2 == 1;
    SCOPED_TRACE(c.describe());
    const Nvfp4PageLayout layout(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 400 + i);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    Stream stream;

    DeviceCase direct = upload_case(c, initial);
    direct.args.stream = stream.get();
    ASSERT_TRUE(writer->write(direct.args).is_ok());
    check_cuda(cudaStreamSynchronize(stream.get()), "direct write");

    DeviceCase graphed = upload_case(c, initial);
    graphed.args.stream = stream.get();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "capture");
    const Status s = writer->write(graphed.args);
    check_cuda(cudaStreamEndCapture(stream.get(), &graph), "end capture");
    ASSERT_TRUE(s.is_ok()) << s.message();
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    // Nothing ran during capture.
    EXPECT_EQ(graphed.cache.download_all<uint8_t>(), initial);
    for (int replay = 0; replay < 3; ++replay) {
      graphed.cache.upload(initial);
      check_cuda(cudaGraphLaunch(exec, stream.get()), "replay");
      check_cuda(cudaStreamSynchronize(stream.get()), "replay sync");
      ASSERT_EQ(compare_cache(graphed.cache.download_all<uint8_t>(),
                              direct.cache.download_all<uint8_t>(), layout.descriptor()),
                "")
          << "replay " << replay;
    }
    if (c.device_scales) {
      // New scale values, same graph: the replay reads them.
      c.k_scale *= 2.0f;
      c.v_scale *= 0.5f;
      const float sc[2] = {c.k_scale, c.v_scale};
      graphed.scales.upload(sc, sizeof sc);
      graphed.cache.upload(initial);
      check_cuda(cudaGraphLaunch(exec, stream.get()), "replay with new scales");
      check_cuda(cudaStreamSynchronize(stream.get()), "replay sync");
      std::vector<uint8_t> want = initial;
      reference_write(c, want);
      ASSERT_EQ(compare_cache(graphed.cache.download_all<uint8_t>(), want, layout.descriptor()),
                "");
    }
    int64_t count = -1;
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, 0);
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace kvq::cuda_nvfp4::test
