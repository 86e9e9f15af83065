// host_app: a complete host program against the installed kvq package. It loads a config,
// applies its log level, opens the config's backend, sizes a cache from the writer's layout,
// writes T tokens of bf16 K/V rows into it, reads them back as f32 and prints the error.
//   host_app CONFIG [NUM_TOKENS]     (e.g. <prefix>/share/kvq/configs/reference_cpu.yaml)
// The tensors live in host memory, so the config's backend must write on the CPU (reference_cpu;
// a GPU backend takes device pointers, which this example does not allocate).
// Exit status: 0 success, 1 a kvq error (printed on stderr), 2 bad usage.
#include <kvq/core/bf16.h>         // float_to_bf16
#include <kvq/core/kv_cache.h>     // WriteArgs, ReadArgs, cache_view
#include <kvq/core/logging.h>      // set_log_level
#include <kvq/core/status.h>       // kvq::Error, throw_if_error
#include <kvq/core/tensor_view.h>  // make_view
#include <kvq/io/config.h>         // load_config
#include <kvq/io/open_backend.h>   // open_backend

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

struct Error {
  double relative = 0;  // ||x - x'|| / ||x|| over all elements
  double max = 0;       // max |x - x'|
};

Error compare(const std::vector<uint16_t>& bf16, const std::vector<float>& back) {
  double diff2 = 0, ref2 = 0, max = 0;
  for (size_t i = 0; i < bf16.size(); ++i) {
    const double x = kvq::bf16_to_float(bf16[i]);
    const double d = x - back[i];
    diff2 += d * d;
    ref2 += x * x;
    max = std::max(max, std::abs(d));
  }
  return {ref2 > 0 ? std::sqrt(diff2 / ref2) : 0.0, max};
}

int run(const std::string& config_file, int64_t T) {
  // 1. The config: geometry, layout, scales, backend. A host applies log.level itself (kvq's
  //    programs do the same); KVQ_LOG_LEVEL, when set, still wins.
  kvq::Config cfg = kvq::load_config(config_file);
  kvq::set_log_level(cfg.log.level);

  // 2. config -> registry -> backend: plugins from plugin_paths, KVQ_PLUGIN_PATH and the folder
  //    installed beside libkvq_core (<prefix>/lib/kvq/plugins).
  kvq::OpenedBackend opened = kvq::open_backend(cfg);
  auto writer = opened.backend.make_writer(opened.options);
  auto reader = opened.backend.make_reader(opened.options);
  if (writer->device() != kvq::Device::cpu()) {
    std::fprintf(stderr,
                 "host_app: backend %s writes on %s; this example keeps its tensors in host "
                 "memory: use a config with backend: reference_cpu\n",
                 opened.backend.info().name.c_str(), kvq::to_string(writer->device()).c_str());
    return 1;
  }

  // 3. The cache: [num_blocks, page_bytes] uint8, sized by the writer's layout.
  const kvq::PageLayout& layout = writer->layout();
  const auto [num_blocks, page_bytes] = layout.cache_shape();
  std::vector<uint8_t> cache(layout.cache_bytes());
  const int64_t H = cfg.cache.num_kv_heads, D = cfg.cache.head_size, B = cfg.cache.block_size;
  if (T > num_blocks * B) {
    std::fprintf(stderr, "host_app: %lld tokens do not fit in %lld pages of %lld\n",
                 static_cast<long long>(T), static_cast<long long>(num_blocks),
                 static_cast<long long>(B));
    return 2;
  }

  // 4. The inputs: K and V [T, H, D] bf16, and where each token goes: slot = page * B + offset.
  //    Pages are handed out from the end of the cache, as a block allocator might.
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t elements = static_cast<size_t>(T * H * D);
  std::vector<uint16_t> key(elements), value(elements);
  for (auto& x : key) x = kvq::float_to_bf16(normal(rng));
  for (auto& x : value) x = kvq::float_to_bf16(0.5f * normal(rng));
  std::vector<int64_t> slots(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    slots[static_cast<size_t>(t)] = (num_blocks - 1 - t / B) * B + t % B;
  }

  // 5. The write. The config's k_scale / v_scale are not read by the writer: pass them.
  kvq::WriteArgs w;
  w.key = kvq::make_view(key.data(), kvq::DType::bf16, {T, H, D});
  w.value = kvq::make_view(value.data(), kvq::DType::bf16, {T, H, D});
  w.slot_mapping = kvq::make_view(slots.data(), kvq::DType::i64, {T});
  w.cache = kvq::cache_view(layout, cache.data());
  w.k_scale = cfg.cache.k_scale;
  w.v_scale = cfg.cache.v_scale;
  kvq::throw_if_error(writer->write(w));

  // 6. The read: the same slots back to f32, with the same scales.
  std::vector<float> key_back(elements), value_back(elements);
  kvq::ReadArgs r;
  r.cache = w.cache;
  r.slot_mapping = w.slot_mapping;
  r.key = kvq::make_view(key_back.data(), kvq::DType::f32, {T, H, D});
  r.value = kvq::make_view(value_back.data(), kvq::DType::f32, {T, H, D});
  r.k_scale = w.k_scale;
  r.v_scale = w.v_scale;
  kvq::throw_if_error(reader->read(r));

  const Error k = compare(key, key_back), v = compare(value, value_back);
  std::printf("host_app: backend %s, %s cache of %lld pages x %lld bytes (%llu bytes)\n",
              opened.backend.info().name.c_str(), cfg.cache.format.c_str(),
              static_cast<long long>(num_blocks), static_cast<long long>(page_bytes),
              static_cast<unsigned long long>(layout.cache_bytes()));
  std::printf("host_app: wrote and read %lld tokens x %lld heads x %lld (bf16 in, f32 out)\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D));
  std::printf("host_app: K relative error %.4f, max error %.4f (k_scale %g)\n", k.relative, k.max,
              static_cast<double>(w.k_scale));
  std::printf("host_app: V relative error %.4f, max error %.4f (v_scale %g)\n", v.relative, v.max,
              static_cast<double>(w.v_scale));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: host_app CONFIG [NUM_TOKENS]\n");
    return 2;
  }
  long long tokens = 64;
  if (argc == 3) {
    char* end = nullptr;
    tokens = std::strtoll(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || tokens < 1) {
      std::fprintf(stderr, "host_app: NUM_TOKENS: expected a positive integer, found '%s'\n",
                   argv[2]);
      return 2;
    }
  }
  try {
    return run(argv[1], tokens);
  } catch (const kvq::Error& e) {  // config errors (FILE:LINE:COL), plugins, writes, reads
    std::fprintf(stderr, "host_app: %s\n", e.what());
    return 1;
  }
}
