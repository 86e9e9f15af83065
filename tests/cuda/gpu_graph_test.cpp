// Writes and reads captured into CUDA graphs: a replay gives the bytes of a direct launch; with
// scales by device pointer, replays pick up new scale values without re-capture. The capture may
// be the stream's first use by the writer (its device not yet asked: asking it then would break
// the capture), in every capture mode; every later take counts the replays; a refused write
// inside a capture leaves the capture intact; an error left over from earlier work is not blamed
// on the next write.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_support.h"

namespace kvq::cuda::test {
namespace {

constexpr cudaStreamCaptureMode kModes[3] = {
    cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal, cudaStreamCaptureModeRelaxed};

TEST(GpuGraph, CapturedWriteReplaysToTheSameBytesAsADirectLaunch) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(77);
  for (int i = 0; i < 6; ++i) {
    WriteCase c = random_case(rng, i * 9);
    c.device_scales = i % 2 == 1;
    const cudaStreamCaptureMode mode = kModes[i % 3];
    // Even cases: the captured write is the writer's first on its stream; odd: a direct write on
    // the same stream came first.
    const bool capture_first = i % 2 == 0;
    SCOPED_TRACE(c.describe() + ", capture mode " + capture_mode_name(mode) +
                 (capture_first ? ", captured write first on its stream" : ", direct write first"));
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 400 + i);
    auto writer = make_writer(c.spec);
    ASSERT_TRUE(writer);
    Stream direct_stream, graph_stream;
    DeviceCase direct = upload_case(c, initial);
    direct.args.stream = capture_first ? direct_stream.get() : graph_stream.get();
    DeviceCase graphed = upload_case(c, initial);
    graphed.args.stream = graph_stream.get();
    ASSERT_FALSE(HasFatalFailure());

    auto write_direct = [&] {
      const Status s = writer->write(direct.args);
      ASSERT_TRUE(s.is_ok()) << s.message();
      check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(direct.args.stream)),
                 "direct write");
      EXPECT_EQ(direct.guards_changed(), "") << "direct write";
    };
    if (!capture_first) {
      write_direct();
      ASSERT_FALSE(HasFatalFailure());
    }
    Status captured;
    const CapturedGraph graph(
        graph_stream.get(), [&] { captured = writer->write(graphed.args); }, mode);
    ASSERT_TRUE(captured.is_ok()) << captured.message();
    ASSERT_NE(graph.exec(), nullptr);
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    // Nothing ran during capture.
    EXPECT_EQ(compare_cache(graphed, initial, layout.descriptor()), "");
    if (capture_first) {
      write_direct();
      ASSERT_FALSE(HasFatalFailure());
    }
    for (int replay = 0; replay < 3; ++replay) {
      graphed.upload_cache(initial);
      check_cuda(cudaGraphLaunch(graph.exec(), graph_stream.get()), "replay");
      check_cuda(cudaStreamSynchronize(graph_stream.get()), "replay sync");
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(compare_cache(graphed, direct.download_cache(), layout.descriptor()), "")
          << "replay " << replay;
    }
    if (c.device_scales) {
      // New scale values, same graph: the replay reads them.
      c.k_scale *= 2.0f;
      c.v_scale *= 0.5f;
      const float sc[2] = {c.k_scale, c.v_scale};
      graphed.scales.upload(sc, sizeof sc);
      graphed.upload_cache(initial);
      check_cuda(cudaGraphLaunch(graph.exec(), graph_stream.get()), "replay with new scales");
      check_cuda(cudaStreamSynchronize(graph_stream.get()), "replay sync");
      ASSERT_FALSE(HasFatalFailure());
      std::vector<uint8_t> want = initial;
      reference_write(c, want);
      ASSERT_EQ(compare_cache(graphed, want, layout.descriptor()), "");
    }
    int64_t count = -1;
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, 0);
  }
}

// Replays of a captured write never call write(), so the writer cannot know when they run:
// every take after a capture waits for the whole device and counts them, with no sync by the
// caller first (a flag the first take cleared used to leave later replays unwaited for, on a
// non-blocking stream that the take's copy is not ordered after).
TEST(GpuGraph, EveryTakeCountsTheReplaysOfACapturedWrite) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(79);
  WriteCase c = random_case(rng, 0);
  c.slots[0] = c.spec.num_blocks * c.spec.block_size;  // one out-of-range token a write
  const PageLayout layout = PageLayout::from_spec(c.spec);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  Stream stream;  // non-blocking
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 500);
  DeviceCase d = upload_case(c, initial);
  d.args.stream = stream.get();
  ASSERT_FALSE(HasFatalFailure());
  Status captured;
  const CapturedGraph graph(
      stream.get(), [&] { captured = writer->write(d.args); }, cudaStreamCaptureModeThreadLocal);
  ASSERT_TRUE(captured.is_ok()) << captured.message();
  ASSERT_NE(graph.exec(), nullptr);
  int64_t count = -1;
  ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
  EXPECT_EQ(count, 0) << "captured, not run";
  for (int replays = 1; replays <= 3; ++replays) {
    for (int r = 0; r < replays; ++r) {
      check_cuda(cudaGraphLaunch(graph.exec(), stream.get()), "replay");
    }
    ASSERT_TRUE(writer->take_out_of_range_slots(&count).is_ok());
    EXPECT_EQ(count, replays) << "the take after " << replays << " replays";
  }
  // The replays wrote the in-range tokens and nothing at the slot past the cache.
  check_cuda(cudaStreamSynchronize(stream.get()), "replays");
  std::vector<uint8_t> want = initial;
  reference_write(c, want);
  EXPECT_EQ(compare_cache(d, want, layout.descriptor()), "");
}

TEST(GpuGraph, RefusedWriteInsideACaptureLeavesTheCaptureIntact) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(78);
  WriteCase c = random_case(rng, 0);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 501);
  std::vector<uint8_t> want = initial;
  reference_write(c, want);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  for (const cudaStreamCaptureMode mode : kModes) {
    SCOPED_TRACE(std::string("capture mode ") + capture_mode_name(mode));
    Stream stream;
    DeviceCase d = upload_case(c, initial);
    d.args.stream = stream.get();
    ASSERT_FALSE(HasFatalFailure());
    WriteArgs bad = d.args;
    bad.k_scale = -1.0f;
    bad.k_scale_ptr = nullptr;
    Status refused, written;
    const CapturedGraph graph(
        stream.get(),
        [&] {
          refused = writer->write(bad);
          written = writer->write(d.args);
        },
        mode);
    EXPECT_EQ(refused.code(), ErrorCode::invalid_argument) << refused.message();
    ASSERT_TRUE(written.is_ok()) << written.message();
    ASSERT_NE(graph.exec(), nullptr);
    check_cuda(cudaGraphLaunch(graph.exec(), stream.get()), "replay");
    check_cuda(cudaStreamSynchronize(stream.get()), "replay sync");
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(compare_cache(d, want, layout.descriptor()), "");
  }
}

TEST(GpuGraph, CapturedReadReplaysToTheSameBitsAsADirectRead) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(79);
  for (int i = 0; i < 3; ++i) {
    WriteCase c = random_case(rng, i * 7);
    const cudaStreamCaptureMode mode = kModes[i];
    SCOPED_TRACE(c.describe() + ", capture mode " + capture_mode_name(mode));
    const PageLayout layout = PageLayout::from_spec(c.spec);
    const int64_t T = c.tokens, H = c.spec.num_kv_heads, D = c.spec.head_size;
    auto writer = make_writer(c.spec);
    auto reader = make_reader(c.spec);
    ASSERT_TRUE(writer && reader);
    DeviceCase d = upload_case(c, poison(layout.cache_bytes(), 600 + i));
    ASSERT_TRUE(writer->write(d.args).is_ok());
    check_cuda(cudaDeviceSynchronize(), "write");
    const size_t bytes = static_cast<size_t>(2 * T * H * D * 4);
    DeviceBuffer direct_out(bytes), graph_out(bytes);
    ASSERT_FALSE(HasFatalFailure());
    auto read_args = [&](DeviceBuffer& out, cudaStream_t stream) {
      ReadArgs r;
      r.cache = d.args.cache;
      r.slot_mapping = d.args.slot_mapping;
      r.key = make_view(out.get(), DType::f32, {T, H, D}, Device::cuda(0));
      r.value = make_view(static_cast<float*>(out.get()) + T * H * D, DType::f32, {T, H, D},
                          Device::cuda(0));
      r.k_scale = c.k_scale;
      r.v_scale = c.v_scale;
      r.stream = stream;
      return r;
    };
    Stream stream;  // first seen by the reader inside the capture
    Status captured;
    const CapturedGraph graph(
        stream.get(), [&] { captured = reader->read(read_args(graph_out, stream.get())); }, mode);
    ASSERT_TRUE(captured.is_ok()) << captured.message();
    ASSERT_NE(graph.exec(), nullptr);
    check_cuda(cudaGraphLaunch(graph.exec(), stream.get()), "replay");
    check_cuda(cudaStreamSynchronize(stream.get()), "replay sync");
    const Status direct = reader->read(read_args(direct_out, stream.get()));
    ASSERT_TRUE(direct.is_ok()) << direct.message();
    check_cuda(cudaStreamSynchronize(stream.get()), "direct read");
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<uint8_t> a = graph_out.download_all<uint8_t>();
    const std::vector<uint8_t> b = direct_out.download_all<uint8_t>();
    ASSERT_TRUE(a == b) << "graph replay and direct read differ";
  }
}

TEST(GpuGraph, ErrorLeftOverFromEarlierWorkIsNotBlamedOnTheWrite) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(80);
  WriteCase c = random_case(rng, 2);
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 700);
  std::vector<uint8_t> want = initial;
  reference_write(c, want);
  auto writer = make_writer(c.spec);
  ASSERT_TRUE(writer);
  DeviceCase d = upload_case(c, initial);
  ASSERT_FALSE(HasFatalFailure());
  // Someone else's failed call, its (non-sticky) error not taken.
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(count + 5), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  const Status s = writer->write(d.args);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the leftover error is reset by the write";
  check_cuda(cudaDeviceSynchronize(), "write");
  ASSERT_EQ(compare_cache(d, want, layout.descriptor()), "");
}

}  // namespace
}  // namespace kvq::cuda::test
