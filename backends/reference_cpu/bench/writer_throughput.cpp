// Throughput of the reference CPU writer, in GB/s of input consumed (key + value bytes per second,
// 1 GB = 1e9 bytes). Gaussian bf16 rows, one token per slot in a shuffled order, the SM100 default
// layout (HND, K linear, V sm100_swizzled). Results go in docs/benchmarks.md, "CPU reference".
//
//   kvq_reference_cpu_bench [--tokens 4096] [--heads 8] [--head-size 128] [--block-size 16]
//                           [--threads 1,2] [--iterations 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvq/core/median.h"
#include "kvq/reference_cpu/reference_writer.h"

namespace {

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

std::vector<int> thread_list(int argc, char** argv) {
  std::string word = "1,2";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) word = argv[i + 1];
  }
  std::vector<int> out;
  std::stringstream in(word);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// The 1-minute load average: on a shared machine, other work competes for the same cores.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string first;
  in >> first;
  return first.empty() ? "?" : first;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvq;
  const int64_t T = arg(argc, argv, "--tokens", 4096);
  const int64_t H = arg(argc, argv, "--heads", 8);
  const int64_t D = arg(argc, argv, "--head-size", 128);
  const int64_t block_size = arg(argc, argv, "--block-size", 16);
  const int64_t iterations = arg(argc, argv, "--iterations", 20);
  if (iterations < 1) {  // the median of no timings is no figure at all
    std::fprintf(stderr, "--iterations %lld: expected at least 1\n",
                 static_cast<long long>(iterations));
    return 2;
  }

  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<uint16_t> key(static_cast<size_t>(T * H * D)), value(key.size());
  for (auto& x : key) x = to_bf16(gauss(rng));
  for (auto& x : value) x = to_bf16(gauss(rng));
  const int64_t num_blocks = (T + block_size - 1) / block_size;
  std::vector<int64_t> slots(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);

  BackendOptions options;
  options.cache.num_blocks = num_blocks;
  options.cache.block_size = block_size;
  options.cache.num_kv_heads = H;
  options.cache.head_size = D;
  const double input_bytes = 2.0 * static_cast<double>(key.size()) * 2.0;

  std::printf(
      "reference_cpu writer: T=%lld H=%lld D=%lld bf16, block_size %lld, %s/%s/%s, "
      "%lld iterations (median)\n",
      static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D),
      static_cast<long long>(block_size), options.cache.layout.order.c_str(),
      options.cache.layout.k_scales.c_str(), options.cache.layout.v_scales.c_str(),
      static_cast<long long>(iterations));
  std::printf("%u hardware threads, load average %s\n", std::thread::hardware_concurrency(),
              load_average().c_str());
  for (int threads : thread_list(argc, argv)) {
    options.threads = threads;
    reference_cpu::ReferenceWriter writer(options);
    std::vector<uint8_t> cache(writer.layout().cache_bytes());
    WriteArgs a;
    a.key = make_view(key.data(), DType::bf16, {T, H, D});
    a.value = make_view(value.data(), DType::bf16, {T, H, D});
    a.slot_mapping = make_view(slots.data(), DType::i64, {T});
    a.cache = make_view(cache.data(), DType::u8,
                        {num_blocks, static_cast<int64_t>(writer.layout().page_bytes())});
    std::vector<double> seconds;
    for (int64_t it = 0; it < iterations + 2; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = writer.write(a);
      const auto t1 = std::chrono::steady_clock::now();
      if (!s) {
        std::fprintf(stderr, "write failed: %s\n", s.message().c_str());
        return 1;
      }
      if (it >= 2) seconds.push_back(std::chrono::duration<double>(t1 - t0).count());  // 2 warm-up
    }
    const double median_s = median(seconds);
    const double min_s = *std::min_element(seconds.begin(), seconds.end());
    std::printf("threads %d: %.3f ms per write, %.3f GB/s of input (min %.3f ms)\n",
                writer.threads(), median_s * 1e3, input_bytes / median_s / 1e9, min_s * 1e3);
  }
  return 0;
}
