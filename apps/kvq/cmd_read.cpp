// kvq read CONFIG --cache C.safetensors --slot-mapping S.safetensors --output OUT.safetensors
//               [--backend NAME]
// Dequantizes the K and V rows of S's slot_mapping [T] (I64|I32; negative slots read as zeros)
// from C's kv_cache into OUT: key, value F32 [T, H, D]. The scales are S's k_scale / v_scale when
// it has them (S may be the file given to kvq write), else the ones C records, else the config's.
#include <fmt/format.h>

#include <iostream>
#include <vector>

#include "backend_call.h"
#include "cache_file.h"
#include "commands.h"
#include "kvq/core/file_io.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/open_backend.h"
#include "kvq/core/safetensors.h"
#include "tensor_staging.h"

namespace kvq::app {
namespace {

struct ReadFlags {
  std::string config, cache, slot_mapping, output, backend;
};

// The read's outputs, key and value F32 [T, H, D], zeroed. Throws kvq::Error (runtime), as
// allocate_cache does for a cache, naming `slot_file` (its T) and their size when host memory
// cannot hold them, or their size passes 2^63 - 1 bytes.
struct Outputs {
  std::vector<float> key, value;
};
Outputs allocate_outputs(int64_t T, int64_t H, int64_t D, const std::string& slot_file) {
  int64_t elements = 0, each = 0, both = 0;
  const bool sized = !__builtin_mul_overflow(T, H, &elements) &&
                     !__builtin_mul_overflow(elements, D, &elements) &&
                     !__builtin_mul_overflow(elements, int64_t{4}, &each) &&
                     !__builtin_mul_overflow(each, int64_t{2}, &both);
  Outputs out;
  if (sized && try_resize(out.key, static_cast<size_t>(elements)) &&
      try_resize(out.value, static_cast<size_t>(elements))) {
    return out;
  }
  throw Error(
      ErrorCode::runtime,
      fmt::format("{}: an output of {} (key and value F32 [{}, {}, {}]{}) does not fit in "
                  "host memory",
                  slot_file, sized ? fmt::format("{} bytes", both) : "more than 2^63-1 bytes", T, H,
                  D, sized ? fmt::format(", {} bytes each", each) : ""));
}

int run_read(const ReadFlags& f) {
  auto [cfg, layout] = load_checked_config(f.config);
  apply_logging(cfg);
  check_writable(f.output, "--output");
  check_distinct(f.output, "--output", f.cache, "--cache");
  check_distinct(f.output, "--output", f.slot_mapping, "--slot-mapping");
  check_distinct(f.output, "--output", f.config, "CONFIG");
  CacheFile cache = load_cache_file(f.cache, *layout, f.config);

  const SafetensorsFile s = SafetensorsFile::load(f.slot_mapping);
  const SafetensorsTensor& slots = s.at("slot_mapping");
  if ((slots.dtype != DType::i64 && slots.dtype != DType::i32) || slots.shape.size() != 1) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("{}: tensor 'slot_mapping': {} {}: expected I64 or I32 [num_tokens]",
                    s.source(), safetensors_dtype_name(slots.dtype), shape_text(slots.shape)));
  }
  const float k_scale =
      optional_scale(s, "k_scale").value_or(cache.k_scale.value_or(cfg.cache.k_scale));
  const float v_scale =
      optional_scale(s, "v_scale").value_or(cache.v_scale.value_or(cfg.cache.v_scale));
  const int64_t T = slots.shape[0], H = cfg.cache.num_kv_heads, D = cfg.cache.head_size;
  Outputs out = allocate_outputs(T, H, D, s.source());  // before a plugin is loaded

  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  const auto reader =
      at_config_keys(cfg, [&] { return opened.backend.make_reader(opened.options); });
  TensorStaging staging(
      at_config_keys(cfg, [&] { return opened.backend.make_runtime(opened.options); }));
  check_same_device(opened.backend.info().name, "reader", reader->device(), staging.device());

  const TensorView host_key = make_view(out.key.data(), DType::f32, {T, H, D});
  const TensorView host_value = make_view(out.value.data(), DType::f32, {T, H, D});
  ReadArgs args;
  args.cache = staging.upload(cache_view(*layout, cache.bytes.data()), "the cache");
  args.slot_mapping = staging.upload(slots.view(), "slot_mapping");
  args.key = staging.upload(host_key, "key");
  args.value = staging.upload(host_value, "value");
  args.k_scale = k_scale;
  args.v_scale = v_scale;
  args.stream = staging.stream();
  throw_if_failed(reader->read(args), f.slot_mapping, opened.backend.info().name);
  staging.download(args.key, host_key, "key");
  staging.download(args.value, host_value, "value");

  save_safetensors(f.output, {{"key", host_key}, {"value", host_value}});
  std::cout << fmt::format("{}: read {} tokens with {} into {} (k_scale {}, v_scale {})", f.cache,
                           T, opened.backend.info().name, f.output, k_scale, v_scale)
            << "\n";
  return kExitOk;
}

}  // namespace

void add_read_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "read", "Dequantize the K and V rows of given slots from a cache file to F32");
  auto f = std::make_shared<ReadFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (must match the cache's layout)")
      ->check(kNonEmpty)
      ->required();
  sub->add_option("--cache", f->cache, "Cache file from kvq write (kv_cache + layout metadata)")
      ->check(kNonEmpty)
      ->required();
  sub->add_option("--slot-mapping", f->slot_mapping,
                  "safetensors with slot_mapping [T] (I64|I32); its k_scale, v_scale are used "
                  "when present")
      ->check(kNonEmpty)
      ->required();
  sub->add_option("--output", f->output, "safetensors to write: key, value F32 [T, H, D]")
      ->check(kNonEmpty)
      ->required();
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's")
      ->check(kNonEmpty);
  sub->callback([&run, f] { run = [f] { return run_read(*f); }; });
}

}  // namespace kvq::app
