// Not a timed assertion: a bandwidth report of the per-element write and read kernels (issue 48's
// shapes: 8 KV heads x head_size 128, block_size 16, HND; bf16 input), printed one line a case and
// recorded as test properties (--gtest_output JSON), for docs/benchmarks.md:
//   - write: direct launches (events around each, queued back to back) and, in graphs of 16
//     writes, the per-write replay time, as % of a 1 GiB device-to-device copy in the same run;
//   - decode sizes (T <= 256): the graph chain against a stand-in kernel that moves the same bytes
//     (64 read, 32 written per thread for fp8, 64 for bf16 pages) with the same launch;
//   - read at T >= 16384, % of copy.
// Bytes a write moves: the valid tokens' input rows read, their page rows written, the slots read.
// Method as gpu_perf_report_test.cpp (rotated input sets past L2, 5% padding, random page order).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_codec_kernels.h"
#include "gpu_test_support.h"
#include "write_kernel.h"

namespace kvq::cuda::test {
namespace {

constexpr int kWarmup = 5;
constexpr int kIters = 50;
constexpr int kPerGraph = 16;
constexpr size_t kRotateBytes = size_t{512} << 20;

double median_us(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

// Median of kIters (after kWarmup) of launch(i), events around each, queued back to back.
template <class Launch>
double time_us(cudaStream_t stream, Launch&& launch) {
  std::vector<cudaEvent_t> a(kWarmup + kIters), b(kWarmup + kIters);
  for (size_t i = 0; i < a.size(); ++i) {
    check_cuda(cudaEventCreate(&a[i]), "event");
    check_cuda(cudaEventCreate(&b[i]), "event");
    check_cuda(cudaEventRecord(a[i], stream), "record");
    launch(static_cast<int>(i));
    check_cuda(cudaEventRecord(b[i], stream), "record");
  }
  check_cuda(cudaStreamSynchronize(stream), "sync");
  std::vector<double> ms;
  for (size_t i = 0; i < a.size(); ++i) {
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, a[i], b[i]), "elapsed");
    if (i >= kWarmup) ms.push_back(t);
    (void)cudaEventDestroy(a[i]);
    (void)cudaEventDestroy(b[i]);
  }
  return median_us(ms);
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  check_cuda(cudaMemset(src.get(), 1, bytes), "memset");
  const double us = time_us(stream, [&](int) {
    check_cuda(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream),
               "copy");
  });
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6);
}

// Per-launch time of launch(i, stream) in graphs of kPerGraph launches.
template <class Launch>
double chain_us(Launch&& launch, int sets, cudaStream_t stream) {
  std::vector<std::unique_ptr<CapturedGraph>> graphs;
  for (int g = 0; g * kPerGraph < std::max(sets, kPerGraph); ++g) {
    graphs.push_back(std::make_unique<CapturedGraph>(stream, [&] {
      for (int i = 0; i < kPerGraph; ++i) launch((g * kPerGraph + i) % sets, stream);
    }));
    if (graphs.back()->exec() == nullptr) return -1;
    check_cuda(cudaGraphUpload(graphs.back()->exec(), stream), "upload");
  }
  size_t next = 0;
  return time_us(stream,
                 [&](int) {
                   check_cuda(cudaGraphLaunch(graphs[next++ % graphs.size()]->exec(), stream),
                              "replay");
                 }) /
         kPerGraph;
}

TEST(GpuPerf, ElementFormatsReport) {
  KVQ_REQUIRE_CUDA_DEVICE();
  Stream stream;
  ASSERT_FALSE(HasFatalFailure());
  const cudaStream_t st = stream.get();
  const double ceiling = copy_bandwidth(st);
  std::printf("device-to-device copy: %.0f GB/s (read + written)\n", ceiling / 1e9);
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "device");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "sms");
  const int64_t H = 8, D = 128, bs = 16;
  for (const char* format : {"fp8_e4m3", "fp8_e5m2", "bf16"}) {
    const int64_t code_bytes = std::string(format) == "bf16" ? 2 : 1;
    for (int64_t T : {1, 16, 64, 256, 1024, 4096, 16384, 65536}) {
      CacheSpec spec;
      spec.format = format;
      spec.block_size = bs;
      spec.num_kv_heads = H;
      spec.head_size = D;
      const int64_t pages = (T + bs - 1) / bs;
      spec.num_blocks = pages + pages / 16 + 1;
      const PageLayout layout = PageLayout::from_spec(spec);
      DeviceBuffer cache(layout.cache_bytes());
      const size_t set_bytes = static_cast<size_t>(2 * T * H * D * 2);
      const int sets = static_cast<int>(std::clamp<size_t>(kRotateBytes / set_bytes + 1, 2, 64));
      std::mt19937_64 rng(static_cast<uint64_t>(T));
      std::normal_distribution<float> n(0.0f, 1.0f);
      std::vector<uint16_t> host(set_bytes / 2);
      for (auto& v : host) v = float_to_bf16_exact(n(rng));
      std::vector<int64_t> page_order(static_cast<size_t>(spec.num_blocks));
      std::iota(page_order.begin(), page_order.end(), 0);
      std::vector<DeviceBuffer> inputs, slots;
      std::vector<WriteArgs> args;
      int64_t valid = 0;
      const Device dev = Device::cuda(0);
      for (int k = 0; k < sets; ++k) {
        std::rotate(host.begin(), host.begin() + 17, host.end());
        inputs.emplace_back(set_bytes);
        inputs.back().upload(host);
        std::shuffle(page_order.begin(), page_order.end(), rng);
        std::vector<int64_t> sl(static_cast<size_t>(T));
        std::uniform_real_distribution<float> u(0, 1);
        for (int64_t t = 0; t < T; ++t) {
          sl[static_cast<size_t>(t)] =
              u(rng) < 0.05f ? -1 : page_order[static_cast<size_t>(t / bs)] * bs + t % bs;
          if (k == 0 && sl[static_cast<size_t>(t)] >= 0) ++valid;
        }
        slots.emplace_back(sl.size() * 8);
        slots.back().upload(sl);
        WriteArgs a;
        a.key = make_view(inputs.back().get(), DType::bf16, {T, H, D}, dev);
        a.value = make_view(static_cast<uint16_t*>(inputs.back().get()) + T * H * D, DType::bf16,
                            {T, H, D}, dev);
        a.slot_mapping = make_view(slots.back().get(), DType::i64, {T}, dev);
        a.cache = make_view(cache.get(), DType::u8,
                            {spec.num_blocks, static_cast<int64_t>(layout.page_bytes())}, dev);
        a.stream = st;
        args.push_back(a);
      }
      auto writer = make_writer(spec);
      ASSERT_TRUE(writer);
      ASSERT_FALSE(HasFatalFailure());
      const double rows = static_cast<double>(2 * valid * H);
      const double write_bytes =
          rows * static_cast<double>(D * (2 + code_bytes)) + static_cast<double>(T * 8);
      const auto pct = [&](double bytes, double us) {
        return 100.0 * bytes / (us * 1e-6) / ceiling;
      };
      const double direct = time_us(st, [&](int i) {
        EXPECT_TRUE(writer->write(args[static_cast<size_t>(i) % args.size()]).is_ok());
      });
      const double graph = chain_us(
          [&](int i, cudaStream_t s) {
            WriteArgs a = args[static_cast<size_t>(i)];
            a.stream = s;
            EXPECT_TRUE(writer->write(a).is_ok());
          },
          sets, st);
      char line[400];
      int len = std::snprintf(line, sizeof line,
                              "%-8s write T=%-6lld H=8 D=128: direct %.2f us = %.1f%% of copy, "
                              "graph replay %.2f us = %.1f%%",
                              format, static_cast<long long>(T), direct, pct(write_bytes, direct),
                              graph, pct(write_bytes, graph));
      const std::string tag = std::string(format) + "_T" + std::to_string(T);
      RecordProperty("write_direct_pct_" + tag, std::to_string(pct(write_bytes, direct)));
      RecordProperty("write_graph_us_" + tag, std::to_string(graph));
      RecordProperty("write_graph_pct_" + tag, std::to_string(pct(write_bytes, graph)));
      if (T <= 256) {
        // The stand-in: the write's input bytes read, code_bytes / 2 of them written, one thread
        // a 64-byte piece, the write's launch shape for its thread count.
        const unsigned per_64 = static_cast<unsigned>(32 * code_bytes);
        const uint64_t read = set_bytes;
        DeviceBuffer scratch(read / 64 * per_64);
        const unsigned block = launch_shape(read / 64, sms).threads;
        const double stand_in = chain_us(
            [&](int i, cudaStream_t s) {
              (void)launch_stand_in_kernel(s, inputs[static_cast<size_t>(i)].get(), scratch.get(),
                                           read, true, block, per_64);
            },
            sets, st);
        len += std::snprintf(line + len, sizeof line - static_cast<size_t>(len),
                             "; stand-in moving the same bytes %.2f us (write / stand-in %.2f)",
                             stand_in, graph / stand_in);
        RecordProperty("stand_in_graph_us_" + tag, std::to_string(stand_in));
      }
      std::printf("%s\n", line);
      if (T >= 16384) {
        auto reader = make_reader(spec);
        ASSERT_TRUE(reader);
        DeviceBuffer out(static_cast<size_t>(2 * T * H * D * 4));
        auto* o = static_cast<float*>(out.get());
        const double read_us = time_us(st, [&](int i) {
          ReadArgs r;
          r.cache = args[0].cache;
          r.slot_mapping = args[static_cast<size_t>(i) % args.size()].slot_mapping;
          r.key = make_view(o, DType::f32, {T, H, D}, dev);
          r.value = make_view(o + T * H * D, DType::f32, {T, H, D}, dev);
          r.stream = st;
          EXPECT_TRUE(reader->read(r).is_ok());
        });
        const double read_bytes = rows * static_cast<double>(D * code_bytes) +
                                  static_cast<double>(2 * T * H * D * 4 + T * 8);
        std::printf("%-8s read  T=%-6lld H=8 D=128: direct %.2f us = %.1f%% of copy\n", format,
                    static_cast<long long>(T), read_us, pct(read_bytes, read_us));
        RecordProperty("read_direct_pct_" + tag, std::to_string(pct(read_bytes, read_us)));
      }
    }
  }
}

}  // namespace
}  // namespace kvq::cuda::test
