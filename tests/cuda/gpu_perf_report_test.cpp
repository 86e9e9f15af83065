// Not a timed assertion: a quick bandwidth report of the write and read kernels on the device
// (issue 7's shapes and targets), so a GPU run shows where the kernel stands before `kvq bench`.
// Prints one line per case and records each number as a test property (in --gtest_output JSON).
// Method: CUDA events around each launch, 5 warm-up + 50 timed, median and min; input sets
// rotated so that they total well above the 60 MB L2; slots in random page order with 5%
// padding; the device-to-device copy bandwidth measured in the same run as the ceiling.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gpu_codec_kernels.h"
#include "gpu_test_support.h"
#include "write_kernel.h"

namespace kvq::cuda::test {
namespace {

constexpr int kWarmup = 5;
constexpr int kIters = 50;
constexpr size_t kRotateBytes = size_t{512} << 20;  // input sets total >= 512 MB

struct Timing {
  double median_us, min_us;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2] * 1e3, ms.front() * 1e3};
}

class Events {
 public:
  Events() {
    check_cuda(cudaEventCreate(&a_), "event");
    check_cuda(cudaEventCreate(&b_), "event");
  }
  ~Events() {
    (void)cudaEventDestroy(a_);
    (void)cudaEventDestroy(b_);
  }
  cudaEvent_t a_, b_;
};

double copy_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  check_cuda(cudaMemset(src.get(), 1, bytes), "memset");
  Events ev;
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    check_cuda(cudaEventRecord(ev.a_), "record");
    check_cuda(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice), "copy");
    check_cuda(cudaEventRecord(ev.b_), "record");
    check_cuda(cudaEventSynchronize(ev.b_), "sync");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, ev.a_, ev.b_), "elapsed");
    if (i >= 2) ms.push_back(t);
  }
  return 2.0 * static_cast<double>(bytes) / (summarize(ms).min_us * 1e-6);
}

struct Shape {
  int64_t T, H, D, block_size;
  const char* order;
  const char* k_scales;
  const char* v_scales;
};

// Sets of inputs and slots for one shape, and the cache they are written into.
struct Workload {
  CacheSpec spec;
  std::vector<DeviceBuffer> inputs, slots;
  DeviceBuffer cache;
  std::vector<WriteArgs> args;  // one per set
  double write_bytes = 0, read_bytes = 0;
};

void make_workload(const Shape& s, Workload* w) {
  w->spec.block_size = s.block_size;
  w->spec.num_kv_heads = s.H;
  w->spec.head_size = s.D;
  w->spec.layout = {s.order, s.k_scales, s.v_scales};
  const int64_t pages = (s.T + s.block_size - 1) / s.block_size;
  w->spec.num_blocks = pages + pages / 16 + 1;
  const PageLayout layout = PageLayout::from_spec(w->spec);
  w->cache = DeviceBuffer(layout.cache_bytes());
  check_cuda(cudaMemset(w->cache.get(), 0, layout.cache_bytes()), "memset cache");
  const size_t set_bytes = static_cast<size_t>(2 * s.T * s.H * s.D * 2);
  const int sets = static_cast<int>(std::clamp<size_t>(kRotateBytes / set_bytes + 1, 2, 64));
  std::mt19937_64 rng(static_cast<uint64_t>(s.T * 131 + s.H * 7 + s.D));
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint16_t> host(set_bytes / 2);
  for (auto& v : host) v = float_to_bf16_exact(n(rng));  // truncated: representable
  // Random page order, 5% padding.
  std::vector<int64_t> page_order(static_cast<size_t>(w->spec.num_blocks));
  std::iota(page_order.begin(), page_order.end(), 0);
  const Device dev = Device::cuda(0);
  for (int k = 0; k < sets; ++k) {
    DeviceBuffer in(set_bytes);
    // Each set differs a little (shifted copy), never zeros.
    std::rotate(host.begin(), host.begin() + 17, host.end());
    in.upload(host);
    std::shuffle(page_order.begin(), page_order.end(), rng);
    std::vector<int64_t> sl(static_cast<size_t>(s.T));
    std::uniform_real_distribution<float> u(0, 1);
    for (int64_t t = 0; t < s.T; ++t) {
      sl[static_cast<size_t>(t)] =
          u(rng) < 0.05f
              ? -1
              : page_order[static_cast<size_t>(t / s.block_size)] * s.block_size + t % s.block_size;
    }
    DeviceBuffer sd(sl.size() * 8);
    sd.upload(sl);
    WriteArgs a;
    a.key = make_view(in.get(), DType::bf16, {s.T, s.H, s.D}, dev);
    a.value = make_view(static_cast<uint16_t*>(in.get()) + s.T * s.H * s.D, DType::bf16,
                        {s.T, s.H, s.D}, dev);
    a.slot_mapping = make_view(sd.get(), DType::i64, {s.T}, dev);
    a.cache = make_view(w->cache.get(), DType::u8,
                        {w->spec.num_blocks, static_cast<int64_t>(layout.page_bytes())}, dev);
    w->args.push_back(a);
    w->inputs.push_back(std::move(in));
    w->slots.push_back(std::move(sd));
  }
  const double THD = static_cast<double>(s.T * s.H * s.D);
  const double packed = 2.0 * THD * (0.5 + 1.0 / 16);
  w->write_bytes = 2.0 * THD * 2 + packed + static_cast<double>(s.T) * 8;
  w->read_bytes = packed + 2.0 * THD * 4 + static_cast<double>(s.T) * 8;
}

// Median and spread of kIters launches (after kWarmup) of `launch(i)`, events around each. By
// default the stream is synchronized after each launch (host path + launch latency + kernel);
// `queued`: launches go back to back, as `kvq bench` times direct launches, so each call's host
// cost hides behind the previous launch and a pair of events holds only the GPU's time.
template <class Launch>
Timing time_with_events(cudaStream_t stream, Launch&& launch, bool queued = false) {
  std::vector<Events> ev(kWarmup + kIters);
  for (size_t i = 0; i < ev.size(); ++i) {
    check_cuda(cudaEventRecord(ev[i].a_, stream), "record");
    launch(static_cast<int>(i));
    check_cuda(cudaEventRecord(ev[i].b_, stream), "record");
    if (!queued) check_cuda(cudaEventSynchronize(ev[i].b_), "sync");
  }
  check_cuda(cudaStreamSynchronize(stream), "sync");
  std::vector<double> ms;
  for (size_t i = kWarmup; i < ev.size(); ++i) {
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, ev[i].a_, ev[i].b_), "elapsed");
    ms.push_back(t);
  }
  return summarize(ms);
}

Timing time_direct(KVCacheWriter& writer, const Workload& w, cudaStream_t stream,
                   bool queued = false) {
  return time_with_events(
      stream,
      [&](int i) {
        WriteArgs a = w.args[static_cast<size_t>(i) % w.args.size()];
        a.stream = stream;
        const Status s = writer.write(a);
        EXPECT_TRUE(s.is_ok()) << s.message();
      },
      queued);
}

// nullopt (and a test failure) when a capture failed: the report goes on without the number.
std::optional<Timing> time_graph(KVCacheWriter& writer, const Workload& w, cudaStream_t stream) {
  std::vector<std::unique_ptr<CapturedGraph>> graphs;
  for (const WriteArgs& a0 : w.args) {
    WriteArgs a = a0;
    a.stream = stream;
    Status s;
    graphs.push_back(std::make_unique<CapturedGraph>(stream, [&] { s = writer.write(a); }));
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok() || graphs.back()->exec() == nullptr) return std::nullopt;
    check_cuda(cudaGraphUpload(graphs.back()->exec(), stream), "upload");
    if (::testing::Test::HasFailure()) return std::nullopt;
  }
  return time_with_events(stream, [&](int i) {
    check_cuda(cudaGraphLaunch(graphs[static_cast<size_t>(i) % graphs.size()]->exec(), stream),
               "replay");
  });
}

Timing time_read(KVCacheReader& reader, const Workload& w, cudaStream_t stream) {
  const int64_t T = w.args[0].key.shape[0], H = w.spec.num_kv_heads, D = w.spec.head_size;
  DeviceBuffer out(static_cast<size_t>(2 * T * H * D * 4));
  return time_with_events(stream, [&](int i) {
    ReadArgs r;
    r.cache = w.args[0].cache;
    r.slot_mapping = w.args[static_cast<size_t>(i) % w.args.size()].slot_mapping;
    r.key = make_view(out.get(), DType::f32, {T, H, D}, Device::cuda(0));
    r.value = make_view(static_cast<float*>(out.get()) + T * H * D, DType::f32, {T, H, D},
                        Device::cuda(0));
    r.stream = stream;
    const Status s = reader.read(r);
    EXPECT_TRUE(s.is_ok()) << s.message();
  });
}

TEST(GpuPerf, WriteAndReadBandwidthReport) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const double ceiling = copy_bandwidth();
  std::printf("device-to-device copy: %.0f GB/s (read + written)\n", ceiling / 1e9);
  RecordProperty("copy_GBps", std::to_string(ceiling / 1e9));
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::vector<Shape> shapes;
  for (int64_t T : {1, 16, 64, 256, 1024, 4096, 16384, 65536}) {
    shapes.push_back({T, 8, 128, 16, "HND", "linear", "sm100_swizzled"});
  }
  shapes.push_back({65536, 8, 128, 16, "NHD", "linear", "sm100_swizzled"});
  shapes.push_back({65536, 8, 128, 16, "HND", "linear", "linear"});
  shapes.push_back({65536, 8, 128, 64, "HND", "linear", "sm100_swizzled"});
  shapes.push_back({65536, 8, 128, 128, "HND", "linear", "sm100_swizzled"});
  for (auto [H, D] :
       {std::pair<int64_t, int64_t>{1, 128}, {4, 128}, {8, 64}, {8, 256}, {32, 128}}) {
    shapes.push_back({16384, H, D, 16, "HND", "linear", "sm100_swizzled"});
  }
  for (const Shape& s : shapes) {
    Workload w;
    make_workload(s, &w);
    auto writer = make_writer(w.spec);
    ASSERT_TRUE(writer);
    const Timing direct = time_direct(*writer, w, stream);
    const double gbps = w.write_bytes / (direct.median_us * 1e-6) / 1e9;
    char line[320];
    int n = std::snprintf(
        line, sizeof line,
        "write T=%-6lld H=%-2lld D=%-3lld bs=%-3lld %s K %s V %s: median %.2f us, "
        "min %.2f us, %.0f GB/s = %.0f%% of copy",
        static_cast<long long>(s.T), static_cast<long long>(s.H), static_cast<long long>(s.D),
        static_cast<long long>(s.block_size), s.order, s.k_scales, s.v_scales, direct.median_us,
        direct.min_us, gbps, 100.0 * gbps * 1e9 / ceiling);
    if (s.T <= 1024) {
      if (const std::optional<Timing> graph = time_graph(*writer, w, stream)) {
        n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n),
                           "; graph replay median %.2f us", graph->median_us);
        RecordProperty("write_graph_us_T" + std::to_string(s.T), std::to_string(graph->median_us));
      } else {
        n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n),
                           "; graph replay FAILED (see above)");
      }
    }
    std::printf("%s\n", line);
    RecordProperty("write_" + std::string(s.order) + "_" + s.v_scales + "_T" + std::to_string(s.T) +
                       "_H" + std::to_string(s.H) + "_D" + std::to_string(s.D) + "_bs" +
                       std::to_string(s.block_size) + "_pct_copy",
                   std::to_string(100.0 * gbps * 1e9 / ceiling));
    if (s.T >= 16384 && s.H == 8 && s.D == 128 && s.block_size == 16 &&
        std::string(s.order) == "HND" && std::string(s.v_scales) == "sm100_swizzled") {
      auto reader = make_reader(w.spec);
      ASSERT_TRUE(reader);
      const Timing rd = time_read(*reader, w, stream);
      const double rgbps = w.read_bytes / (rd.median_us * 1e-6) / 1e9;
      std::printf(
          "read  T=%-6lld H=8  D=128 bs=16 : median %.2f us, min %.2f us, %.0f GB/s = "
          "%.0f%% of copy\n",
          static_cast<long long>(s.T), rd.median_us, rd.min_us, rgbps,
          100.0 * rgbps * 1e9 / ceiling);
      RecordProperty("read_T" + std::to_string(s.T) + "_pct_copy",
                     std::to_string(100.0 * rgbps * 1e9 / ceiling));
    }
  }
  (void)cudaStreamDestroy(stream);
}

// ---- host cost of a write ------------------------------------------------------------------

// Host microseconds per call of `fn` (median over batches of `calls` back-to-back calls; the
// stream is synchronized between batches so the launch queue never fills and blocks the host).
template <class Fn>
double host_us_per_call(Fn&& fn, cudaStream_t stream, int batches = 20, int calls = 100) {
  std::vector<double> per_call;
  for (int b = 0; b < batches + 2; ++b) {
    check_cuda(cudaStreamSynchronize(stream), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    if (b >= 2)
      per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  check_cuda(cudaStreamSynchronize(stream), "sync");
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

// Median GPU time between events recorded around what `fn` enqueues on an idle stream (the
// method of the main report: host path + launch latency + kernel).
template <class Fn>
double events_around_us(Fn&& fn, cudaStream_t stream) {
  return time_with_events(stream, [&](int) { fn(); }).median_us;
}

void report(const char* what, double us, const std::string& property) {
  std::printf("host cost: %-58s %7.3f us\n", what, us);
  ::testing::Test::RecordProperty(property, std::to_string(us));
}

// Per-launch time of `launch(i, stream)` (i: the launch's input set) in graphs of 16 launches,
// as `kvq bench` times graph replays: replay time / 16, median over rotated graphs.
template <class Launch>
double graph_chain_us(Launch&& launch, int sets, cudaStream_t stream) {
  constexpr int kPerGraph = 16;
  std::vector<std::unique_ptr<CapturedGraph>> graphs;
  for (int g = 0; g * kPerGraph < std::max(sets, kPerGraph); ++g) {
    graphs.push_back(std::make_unique<CapturedGraph>(stream, [&] {
      for (int i = 0; i < kPerGraph; ++i) launch((g * kPerGraph + i) % sets, stream);
    }));
    EXPECT_NE(graphs.back()->exec(), nullptr);
    if (graphs.back()->exec() == nullptr) return -1;
    check_cuda(cudaGraphUpload(graphs.back()->exec(), stream), "upload");
  }
  size_t next = 0;
  return events_around_us(
             [&] { (void)cudaGraphLaunch(graphs[next++ % graphs.size()]->exec(), stream); },
             stream) /
         kPerGraph;
}

// graph_chain_us of the write on input set i, into w.cache or, with `caches`, into caches[i].
double write_chain_us(KVCacheWriter& writer, const Workload& w, int sets, cudaStream_t stream,
                      const std::vector<DeviceBuffer>* caches = nullptr) {
  return graph_chain_us(
      [&](int i, cudaStream_t s) {
        WriteArgs a = w.args[static_cast<size_t>(i)];
        a.stream = s;
        if (caches != nullptr) a.cache.data = (*caches)[static_cast<size_t>(i)].get();
        EXPECT_TRUE(writer.write(a).is_ok());
      },
      sets, stream);
}

// graph_chain_us of the stand-in kernel reading input set i (K and V) into `scratch`, in blocks
// of `block_threads`.
double stand_in_chain_us(const Workload& w, void* scratch, bool prefetch, unsigned block_threads,
                         cudaStream_t stream) {
  return graph_chain_us(
      [&](int i, cudaStream_t s) {
        const DeviceBuffer& in = w.inputs[static_cast<size_t>(i)];
        (void)launch_stand_in_kernel(s, in.get(), scratch, in.bytes(), prefetch, block_threads);
      },
      static_cast<int>(w.inputs.size()), stream);
}

// The SMs of the current device (launch_shape's small-grid rule needs them).
int device_sms() {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute(multiprocessor count)");
  return sms;
}

// Issue 7's decode target in graph replay (<= 3 us a write), and its one-wave miss at T >= 16384
// (H=1 D=128 T=16384: 131,072 items, one wave of the streaming kernel), against what the same
// chain costs for a kernel that only waits for its predecessor (the floor), and for one that moves
// the same bytes as the write with the write's launch and thread count but does no quantization,
// loading only after its wait or, as small writes do (docs/kernel-design.md, v12), prefetching
// into L2 before it. The write is timed three ways: on the rotated input sets into one cache, whose
// page lines L2 mostly keeps (little of the output goes to DRAM inside the timed chain); the same
// with a cache per set, as `kvq bench` rotates them (every page line cold, all output to DRAM); and
// on one set again and again, whose inputs stay in L2 (what a perfect prefetch would give).
TEST(GpuPerf, DecodeGraphChainReport) {
  KVQ_REQUIRE_CUDA_DEVICE();
  Stream stream;
  ASSERT_FALSE(HasFatalFailure());
  const cudaStream_t st = stream.get();
  for (const Shape& shape : {Shape{256, 32, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{1024, 8, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{256, 8, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{16384, 1, 128, 16, "HND", "linear", "sm100_swizzled"}}) {
    Workload w;
    make_workload(shape, &w);
    auto writer = make_writer(w.spec);
    ASSERT_TRUE(writer);
    const int sets = static_cast<int>(w.args.size());
    const uint64_t read_bytes = w.inputs[0].bytes();  // K and V of the set, bf16
    DeviceBuffer scratch(read_bytes / 4);
    ASSERT_FALSE(HasFatalFailure());
    // Blocks as a streaming (one-wave) write of the stand-in's thread count gets them.
    const unsigned block = launch_shape(read_bytes / 64, device_sms()).threads;
    const double empty = graph_chain_us(
        [&](int, cudaStream_t s) {
          (void)launch_stand_in_kernel(s, nullptr, nullptr, 0, false, block);
        },
        sets, st);
    std::vector<DeviceBuffer> caches;  // [sets], each like w.cache
    for (int i = 0; i < sets; ++i) caches.emplace_back(w.cache.bytes());
    ASSERT_FALSE(HasFatalFailure());
    const double plain = stand_in_chain_us(w, scratch.get(), false, block, st),
                 prefetched = stand_in_chain_us(w, scratch.get(), true, block, st);
    const double one_cache = write_chain_us(*writer, w, sets, st),
                 cache_per_set = write_chain_us(*writer, w, sets, st, &caches),
                 hot = write_chain_us(*writer, w, 1, st);
    std::printf(
        "one-wave graph chain (16 a graph) T=%-5lld H=%-2lld D=%lld: empty PDL kernel %.2f us; "
        "stand-in moving the bytes (%.2f MB read, %.2f MB written) %.2f us, with L2 prefetch "
        "%.2f us; write %.2f us, a cache per set %.2f us, inputs hot in L2 %.2f us\n",
        static_cast<long long>(shape.T), static_cast<long long>(shape.H),
        static_cast<long long>(shape.D), empty, static_cast<double>(read_bytes) * 1e-6,
        static_cast<double>(read_bytes) * 0.25e-6, plain, prefetched, one_cache, cache_per_set,
        hot);
    const std::string tag = "_T" + std::to_string(shape.T) + "_H" + std::to_string(shape.H);
    RecordProperty("chain_empty_us" + tag, std::to_string(empty));
    RecordProperty("chain_stand_in_us" + tag, std::to_string(plain));
    RecordProperty("chain_stand_in_prefetch_us" + tag, std::to_string(prefetched));
    RecordProperty("chain_write_us" + tag, std::to_string(one_cache));
    RecordProperty("chain_write_cache_per_set_us" + tag, std::to_string(cache_per_set));
    RecordProperty("chain_write_hot_us" + tag, std::to_string(hot));
  }
}

// Issue 7's mid-size writes against what moving the same bytes costs: in direct launches (events
// around each, queued back to back as `kvq bench` does) a device-to-device cudaMemcpyAsync of the
// same read + written bytes (the bench's same_size_copy) and the stand-in kernel (the write's
// programmatic launch; blocks of kWaveBlockThreads, past one wave as every shape here is, though
// one-group writes of dense inputs take kDenseWaveBlockThreads, docs/kernel-design.md, v43;
// the one-group kernel's thread count; the write's bytes on the same rotated input sets; no
// quantization), and in graph replay (16 a graph) the write and the stand-in again. Where the
// stand-in reaches the memcpy and the write does not, the gap is the write's own work, not the
// launch of a kernel of that size.
TEST(GpuPerf, MidSizeAgainstSameBytesReport) {
  KVQ_REQUIRE_CUDA_DEVICE();
  const double ceiling = copy_bandwidth();
  Stream stream;
  ASSERT_FALSE(HasFatalFailure());
  const cudaStream_t st = stream.get();
  for (const Shape& shape : {Shape{4096, 8, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{16384, 8, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{16384, 4, 128, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{16384, 8, 64, 16, "HND", "linear", "sm100_swizzled"},
                             Shape{65536, 1, 128, 16, "HND", "linear", "sm100_swizzled"}}) {
    Workload w;
    make_workload(shape, &w);
    auto writer = make_writer(w.spec);
    ASSERT_TRUE(writer);
    const uint64_t set_bytes = w.inputs[0].bytes();                  // K and V of a set, bf16
    const auto copy_bytes = static_cast<size_t>(w.write_bytes / 2);  // read once, written once
    DeviceBuffer scratch(std::max<size_t>(set_bytes / 4, copy_bytes));
    ASSERT_FALSE(HasFatalFailure());
    const size_t sets = w.inputs.size();
    const auto queued_us = [&](auto&& launch) {
      return time_with_events(st, launch, true).median_us;
    };
    const double write_us = time_direct(*writer, w, st, /*queued=*/true).median_us;
    const double copy_us = queued_us([&](int i) {
      check_cuda(cudaMemcpyAsync(scratch.get(), w.inputs[static_cast<size_t>(i) % sets].get(),
                                 copy_bytes, cudaMemcpyDeviceToDevice, st),
                 "copy");
    });
    const double stand_in_us = queued_us([&](int i) {
      check_cuda(launch_stand_in_kernel(st, w.inputs[static_cast<size_t>(i) % sets].get(),
                                        scratch.get(), set_bytes, false, kWaveBlockThreads),
                 "stand-in");
    });
    const double write_chain = write_chain_us(*writer, w, static_cast<int>(sets), st);
    const double stand_in_chain = stand_in_chain_us(w, scratch.get(), false, kWaveBlockThreads, st);
    const auto pct = [&](double bytes, double us) { return 100.0 * bytes / (us * 1e-6) / ceiling; };
    const double stand_in_bytes = 1.25 * static_cast<double>(set_bytes);
    std::printf(
        "T=%-5lld H=%-2lld D=%lld (%.1f MB; stand-in %.1f MB), %% of copy: direct: write %.2f us = "
        "%.1f%%, memcpy of the same bytes %.2f us = %.1f%%, stand-in %.2f us = %.1f%%; graph "
        "replay: write %.2f us = %.1f%%, stand-in %.2f us = %.1f%%\n",
        static_cast<long long>(shape.T), static_cast<long long>(shape.H),
        static_cast<long long>(shape.D), w.write_bytes * 1e-6, stand_in_bytes * 1e-6, write_us,
        pct(w.write_bytes, write_us), copy_us, pct(2.0 * static_cast<double>(copy_bytes), copy_us),
        stand_in_us, pct(stand_in_bytes, stand_in_us), write_chain, pct(w.write_bytes, write_chain),
        stand_in_chain, pct(stand_in_bytes, stand_in_chain));
    const std::string tag = "_T" + std::to_string(shape.T) + "_H" + std::to_string(shape.H);
    RecordProperty("direct_write_pct" + tag, std::to_string(pct(w.write_bytes, write_us)));
    RecordProperty("direct_memcpy_pct" + tag,
                   std::to_string(pct(2.0 * static_cast<double>(copy_bytes), copy_us)));
    RecordProperty("direct_stand_in_pct" + tag, std::to_string(pct(stand_in_bytes, stand_in_us)));
    RecordProperty("graph_write_pct" + tag, std::to_string(pct(w.write_bytes, write_chain)));
    RecordProperty("graph_stand_in_pct" + tag, std::to_string(pct(stand_in_bytes, stand_in_chain)));
  }
}

// Issue 7's decode targets (<= 6 us direct, <= 3 us graph replay, events around the launch) split
// into their parts: the host time of write() itself, of the CUDA calls it makes, of a bare launch,
// and the events-around floor of an empty kernel (direct and as a graph).
TEST(GpuPerf, HostCostPerWriteReport) {
  KVQ_REQUIRE_CUDA_DEVICE();
  Stream stream;
  ASSERT_FALSE(HasFatalFailure());
  const cudaStream_t st = stream.get();
  for (int64_t T : {1, 256}) {
    Workload w;
    make_workload({T, 8, 128, 16, "HND", "linear", "sm100_swizzled"}, &w);
    auto writer = make_writer(w.spec);
    ASSERT_TRUE(writer);
    WriteArgs a = w.args[0];
    a.stream = st;
    ASSERT_TRUE(writer->write(a).is_ok());  // the stream's first write asks its device
    const std::string t = std::to_string(T);
    report(("write() T=" + t + " H=8 D=128, host time per call").c_str(),
           host_us_per_call([&] { (void)writer->write(a); }, st), "host_write_us_T" + t);
    report(("write() T=" + t + ", events around one write").c_str(),
           events_around_us([&] { (void)writer->write(a); }, st), "events_write_us_T" + t);
  }
  report("empty kernel launch, no parameters",
         host_us_per_call([&] { (void)launch_empty_kernel(st, 0); }, st), "host_empty_launch_us");
  report("empty kernel launch, 280-byte parameter",
         host_us_per_call([&] { (void)launch_empty_kernel(st, 280); }, st),
         "host_empty_launch_280_us");
  report("events around one empty kernel launch (floor of direct)",
         events_around_us([&] { (void)launch_empty_kernel(st, 280); }, st), "events_empty_us");
  {
    const CapturedGraph g(st, [&] { (void)launch_empty_kernel(st, 280); });
    ASSERT_NE(g.exec(), nullptr);
    check_cuda(cudaGraphUpload(g.exec(), st), "upload");
    report("events around one empty-kernel graph replay (floor of graph)",
           events_around_us([&] { (void)cudaGraphLaunch(g.exec(), st); }, st),
           "events_empty_graph_us");
  }
  int dev = -1;
  cudaStreamCaptureStatus cap{};
  report("cudaGetDevice", host_us_per_call([&] { (void)cudaGetDevice(&dev); }, st, 5, 10000),
         "host_cudaGetDevice_us");
  report("cudaStreamIsCapturing",
         host_us_per_call([&] { (void)cudaStreamIsCapturing(st, &cap); }, st, 5, 10000),
         "host_cudaStreamIsCapturing_us");
#if CUDART_VERSION >= 12080
  report("cudaStreamGetDevice (asked once per stream now; was per write)",
         host_us_per_call([&] { (void)cudaStreamGetDevice(st, &dev); }, st, 5, 10000),
         "host_cudaStreamGetDevice_us");
#endif
  report("cudaGetLastError", host_us_per_call([&] { (void)cudaGetLastError(); }, st, 5, 10000),
         "host_cudaGetLastError_us");
}

}  // namespace
}  // namespace kvq::cuda::test
