// kvq read CONFIG --cache C.safetensors --slot-mapping S.safetensors --output OUT.safetensors
//               [--backend NAME] [--compare IN.safetensors [--json FILE]]
// Dequantizes the K and V rows of S's slot_mapping [T] (I64|I32; negative slots read as zeros)
// from C's kv_cache into OUT: key, value F32 [T, H, D]. The scales are S's k_scale / v_scale when
// it has them (S may be the file given to kvq write), else the ones C records, else the config's.
// --compare IN: IN's key and value [T, H, D] (the rows that were written) against the rows read,
// over the tokens with a slot >= 0: relative L2 error and max absolute error per side, printed
// and, with --json, written as JSON.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "backend_call.h"
#include "commands.h"
#include "float_rows.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/io/cache_file.h"
#include "kvq/io/file_io.h"
#include "kvq/io/open_backend.h"
#include "kvq/io/safetensors.h"
#include "tensor_staging.h"

namespace kvq::app {
namespace {

struct ReadFlags {
  std::string config, cache, slot_mapping, output, backend, compare, json;
  std::shared_ptr<CommonFlags> common;
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

// --compare's rows: key and value of `file` as floats, checked to be [T, H, D].
struct CompareRows {
  std::vector<float> key, value;
};
CompareRows load_compare(const std::string& file, int64_t T, int64_t H, int64_t D) {
  const SafetensorsFile c = SafetensorsFile::load(file);
  CompareRows rows;
  for (const char* name : {"key", "value"}) {
    const SafetensorsTensor& t = c.at(name);
    if (t.shape != std::vector<int64_t>{T, H, D}) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: tensor '{}': shape {}: expected [{}, {}, {}] (T of "
                              "--slot-mapping, num_kv_heads and head_size of the config)",
                              c.source(), name, shape_text(t.shape), T, H, D));
    }
    (std::string_view(name) == "key" ? rows.key : rows.value) = to_floats(t, c.source());
  }
  return rows;
}

ErrorFigures compare_side(const std::vector<float>& input, const std::vector<float>& back,
                          const TensorView& slots, int64_t row) {
  ErrorAccumulator acc;
  for (int64_t t = 0; t < slots.size(0); ++t) {
    if (slot_at(slots, t) < 0) continue;
    for (int64_t e = t * row; e < (t + 1) * row; ++e) {
      acc.add(input[static_cast<size_t>(e)], back[static_cast<size_t>(e)]);
    }
  }
  return acc.figures();
}

int run_read(const ReadFlags& f) {
  auto [cfg, layout] = load_checked_config(f.config);
  apply_logging(cfg, *f.common);
  check_writable(f.output, "--output");
  check_distinct(f.output, "--output", f.cache, "--cache");
  check_distinct(f.output, "--output", f.slot_mapping, "--slot-mapping");
  check_distinct(f.output, "--output", f.config, "CONFIG");
  if (!f.json.empty()) {
    check_distinct(f.json, "--json", f.output, "--output");
    check_distinct(f.json, "--json", f.config, "CONFIG");
    check_distinct(f.json, "--json", f.cache, "--cache");
    check_distinct(f.json, "--json", f.slot_mapping, "--slot-mapping");
    check_distinct(f.json, "--json", f.compare, "--compare");
    check_writable(f.json, "--json");
  }
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
  std::optional<CompareRows> compare;
  if (!f.compare.empty()) compare = load_compare(f.compare, T, H, D);

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
  if (compare) {
    const ErrorFigures k = compare_side(compare->key, out.key, slots.view(), H * D);
    const ErrorFigures v = compare_side(compare->value, out.value, slots.view(), H * D);
    std::cout << fmt::format("  vs {} ({} elements a side):\n", f.compare, k.elements);
    std::cout << fmt::format("  K  relative error {:.4f}  max error {:.4g}\n", k.relative, k.max);
    std::cout << fmt::format("  V  relative error {:.4f}  max error {:.4g}\n", v.relative, v.max);
    if (!f.json.empty()) {
      const auto side = [](const ErrorFigures& e) {
        return nlohmann::json{
            {"relative_error", e.relative}, {"max_error", e.max}, {"elements", e.elements}};
      };
      const nlohmann::json j = {
          {"cache", f.cache}, {"compare", f.compare}, {"backend", opened.backend.info().name},
          {"tokens", T},      {"k_scale", k_scale},   {"v_scale", v_scale},
          {"key", side(k)},   {"value", side(v)}};
      write_file_atomically(f.json, j.dump(2) + "\n");
      std::cout << "  wrote " << f.json << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void add_read_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "read", "Dequantize the K and V rows of given slots from a cache file to F32");
  auto f = std::make_shared<ReadFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (must match the cache's layout)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--cache", f->cache, "Cache file from kvq write (kv_cache + layout metadata)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--slot-mapping", f->slot_mapping,
                  "safetensors with slot_mapping [T] (I64|I32); its k_scale, v_scale are used "
                  "when present")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--output", f->output, "safetensors to write: key, value F32 [T, H, D]")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's")
      ->check(kNonEmpty)
      ->type_name("NAME");
  auto* compare =
      sub->add_option("--compare", f->compare,
                      "safetensors with the key, value [T, H, D] that were written (kvq write's "
                      "--input): print K and V relative and max error of the rows read")
          ->check(kNonEmpty)
          ->type_name("FILE");
  sub->add_option("--json", f->json, "With --compare: also write the error figures to this JSON")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->needs(compare);
  f->common = add_common_flags(*sub);
  sub->callback([&run, f] { run = [f] { return run_read(*f); }; });
}

}  // namespace kvq::app
