// kvq write CONFIG --input IN.safetensors --output OUT.safetensors [--backend NAME]
//                  [--cache C.safetensors]
// IN: key, value [T, H, D] BF16|F16|F32; slot_mapping [T] I64|I32; optional k_scale, v_scale F32
// [] or [1] (else the config's). OUT: kv_cache [num_blocks, page_bytes] U8 -- C's pages when given,
// else zeros -- after the write, with the layout (and the scales) in __metadata__.
#include <fmt/format.h>

#include <iostream>
#include <optional>

#include "backend_call.h"
#include "commands.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/logging.h"
#include "kvq/core/slot_mapping.h"
#include "kvq/core/status.h"
#include "kvq/io/cache_file.h"
#include "kvq/io/file_io.h"
#include "kvq/io/open_backend.h"
#include "kvq/io/safetensors.h"
#include "tensor_staging.h"

namespace kvq::app {
namespace {

struct WriteFlags {
  std::string config, input, output, backend, cache;
  std::shared_ptr<CommonFlags> common;
};

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

struct Inputs {
  TensorView key, value, slot_mapping;  // host views into the input file
  float k_scale, v_scale;
  int64_t padding = 0;  // tokens with a negative slot
};

// Checks IN's names, dtypes and shapes against the config, and that no slot repeats (the other
// values are the writer's to check).
Inputs check_inputs(const SafetensorsFile& in, const Config& cfg, const std::string& config) {
  for (const SafetensorsTensor& t : in.tensors()) {
    if (t.name != "key" && t.name != "value" && t.name != "slot_mapping" && t.name != "k_scale" &&
        t.name != "v_scale") {
      bad(
          fmt::format("{}: tensor '{}' is not an input of kvq write: expected key, value, "
                      "slot_mapping and optionally k_scale, v_scale",
                      in.source(), message_text(t.name)));
    }
  }
  const SafetensorsTensor& key = in.at("key");
  if (key.dtype != DType::bf16 && key.dtype != DType::f16 && key.dtype != DType::f32) {
    bad(fmt::format("{}: tensor 'key': dtype {}: expected BF16, F16 or F32", in.source(),
                    safetensors_dtype_name(key.dtype)));
  }
  const int64_t H = cfg.cache.num_kv_heads, D = cfg.cache.head_size;
  if (key.shape.size() != 3 || key.shape[1] != H || key.shape[2] != D) {
    bad(
        fmt::format("{}: tensor 'key': shape {}: expected [num_tokens, {}, {}] (num_kv_heads and "
                    "head_size of {})",
                    in.source(), shape_text(key.shape), H, D, config));
  }
  const SafetensorsTensor& value = in.at("value");
  if (value.dtype != key.dtype || value.shape != key.shape) {
    bad(fmt::format("{}: tensor 'value': {} {}: expected {} {} (like key)", in.source(),
                    safetensors_dtype_name(value.dtype), shape_text(value.shape),
                    safetensors_dtype_name(key.dtype), shape_text(key.shape)));
  }
  const SafetensorsTensor& slots = in.at("slot_mapping");
  if (slots.dtype != DType::i64 && slots.dtype != DType::i32) {
    bad(fmt::format("{}: tensor 'slot_mapping': dtype {}: expected I64 or I32", in.source(),
                    safetensors_dtype_name(slots.dtype)));
  }
  if (slots.shape != std::vector<int64_t>{key.shape[0]}) {
    bad(fmt::format("{}: tensor 'slot_mapping': shape {}: expected [{}] (num_tokens of key)",
                    in.source(), shape_text(slots.shape), key.shape[0]));
  }
  Inputs out{key.view(), value.view(), slots.view(),
             optional_scale(in, "k_scale").value_or(cfg.cache.k_scale),
             optional_scale(in, "v_scale").value_or(cfg.cache.v_scale)};
  for (int64_t i = 0; i < key.shape[0]; ++i) {
    out.padding += slot_at(out.slot_mapping, i) < 0 ? 1 : 0;
  }
  // Checked here, for every backend: a GPU writer cannot see the repeat without a sync, and would
  // leave that slot's bytes unspecified.
  if (const std::optional<RepeatedSlot> r = find_repeated_slot(out.slot_mapping)) {
    bad(
        fmt::format("{}: tensor 'slot_mapping': slot_mapping[{}] = {}, the same slot as "
                    "slot_mapping[{}]: expected each slot at most once",
                    in.source(), r->index, r->slot, r->first));
  }
  return out;
}

// A cache extended with --cache keeps one scale per side: refuse to mix. The scale now is the
// input's tensor `name` when it has one, else the config's cache.<name>.
void check_same_scale(const std::optional<float>& recorded, float now, const char* name,
                      const SafetensorsFile& in, const WriteFlags& f) {
  if (recorded && *recorded != now) {
    const std::string from = in.find(name) ? fmt::format("{}: tensor {}", f.input, name)
                                           : fmt::format("{}: cache.{}", f.config, name);
    bad(
        fmt::format("{} = {} differs from the {} {} that {} was written with (a cache holds one "
                    "scale per side)",
                    from, now, name, *recorded, f.cache));
  }
}

int run_write(const WriteFlags& f) {
  auto [cfg, layout] = load_checked_config(f.config);
  apply_logging(cfg, *f.common);

  // Every file is checked before a plugin is loaded or a byte is written.
  check_writable(f.output, "--output");
  check_distinct(f.output, "--output", f.input, "--input");  // --cache C --output C: in place
  check_distinct(f.output, "--output", f.config, "CONFIG");
  // --cache C --output C is the in-place update, and needs no check: the cache is read whole
  // before the output's own temporary (a new file, never an input) is written and renamed over it.
  const SafetensorsFile in = SafetensorsFile::load(f.input);
  const Inputs x = check_inputs(in, cfg, f.config);
  std::vector<uint8_t> cache;
  if (!f.cache.empty()) {
    CacheFile start = load_cache_file(f.cache, *layout, f.config);
    check_same_scale(start.k_scale, x.k_scale, "k_scale", in, f);
    check_same_scale(start.v_scale, x.v_scale, "v_scale", in, f);
    cache = std::move(start.bytes);
  } else {
    cache = allocate_cache(*layout, f.config);
  }

  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  const auto writer =
      at_config_keys(cfg, [&] { return opened.backend.make_writer(opened.options); });
  TensorStaging staging(
      at_config_keys(cfg, [&] { return opened.backend.make_runtime(opened.options); }));
  check_same_device(opened.backend.info().name, "writer", writer->device(), staging.device());

  const TensorView host_cache = cache_view(*layout, cache.data());
  WriteArgs args;
  args.key = staging.upload(x.key, "key");
  args.value = staging.upload(x.value, "value");
  args.slot_mapping = staging.upload(x.slot_mapping, "slot_mapping");
  args.cache = staging.upload(host_cache, "the cache");
  args.k_scale = x.k_scale;
  args.v_scale = x.v_scale;
  args.stream = staging.stream();
  throw_if_failed(writer->write(args), f.input, opened.backend.info().name);
  int64_t skipped = 0;
  throw_if_error(writer->take_out_of_range_slots(&skipped));
  staging.download(args.cache, host_cache, "the cache");
  if (skipped > 0) {  // only backends that check on the device get here
    throw Error(ErrorCode::out_of_range,
                fmt::format("{}: {} slots >= num_blocks x block_size were skipped by {}", f.input,
                            skipped, opened.backend.info().name));
  }

  save_cache_file(f.output, *layout, cache, x.k_scale, x.v_scale);
  const int64_t tokens = x.key.shape[0];
  std::cout << fmt::format(
                   "{}: wrote {} tokens ({} padding) with {} into {} ({} blocks x {} bytes)",
                   f.input, tokens - x.padding, x.padding, opened.backend.info().name, f.output,
                   layout->geometry().num_blocks, layout->page_bytes())
            << "\n";
  return kExitOk;
}

}  // namespace

void add_write_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "write", "Quantize key/value rows from a safetensors file into a paged cache file");
  auto f = std::make_shared<WriteFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (cache geometry, layout, scales, backend)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--input", f->input,
                  "safetensors with key, value [T,H,D] (BF16|F16|F32), slot_mapping [T] "
                  "(I64|I32), optional k_scale, v_scale (F32)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--output", f->output, "safetensors to write: kv_cache [num_blocks, page_bytes]")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's")
      ->check(kNonEmpty)
      ->type_name("NAME");
  sub->add_option("--cache", f->cache,
                  "Start from this cache file's kv_cache (same layout) instead of zeros")
      ->check(kNonEmpty)
      ->type_name("FILE");
  f->common = add_common_flags(*sub);
  sub->callback([&run, f] { run = [f] { return run_write(*f); }; });
}

}  // namespace kvq::app
