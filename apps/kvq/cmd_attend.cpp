// kvq attend CONFIG --cache C.safetensors --query Q.safetensors --output OUT.safetensors
//               [--backend NAME]
// Decode attention over C's pages (docs/attention.md): Q holds query [S, Hq, D] BF16|F16,
// block_tables [S, M] I32 and seq_lens [S] I32 (0: padding), and optionally k_scale, v_scale
// and softmax_scale (F32 scalars). The scales are Q's when it has them, else the ones C records,
// else the config's; softmax_scale defaults to 1 / sqrt(D). OUT gets output F32 [S, Hq, D].
// Exit status 0, 1 (runtime failure, a backend without attention) or 2 (bad config or file,
// block ids or seq_lens out of range: refused on the host, counted on a device).
#include <fmt/format.h>

#include <iostream>
#include <optional>
#include <vector>

#include "backend_call.h"
#include "commands.h"
#include "kvq/core/attention.h"
#include "kvq/core/kv_cache.h"
#include "kvq/io/cache_file.h"
#include "kvq/io/file_io.h"
#include "kvq/io/open_backend.h"
#include "kvq/io/safetensors.h"
#include "tensor_staging.h"

namespace kvq::app {
namespace {

struct AttendFlags {
  std::string config, cache, query, output, backend;
  std::shared_ptr<CommonFlags> common;
};

[[noreturn]] void bad_tensor(const SafetensorsFile& f, const char* name, const SafetensorsTensor& t,
                             const std::string& expected) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}: tensor '{}': {} {}: expected {}", f.source(), name,
                          safetensors_dtype_name(t.dtype), shape_text(t.shape), expected));
}

int run_attend(const AttendFlags& f) {
  auto [cfg, layout] = load_checked_config(f.config);
  apply_logging(cfg, *f.common);
  check_writable(f.output, "--output");
  check_distinct(f.output, "--output", f.cache, "--cache");
  check_distinct(f.output, "--output", f.query, "--query");
  check_distinct(f.output, "--output", f.config, "CONFIG");
  CacheFile cache = load_cache_file(f.cache, *layout, f.config);

  const SafetensorsFile q = SafetensorsFile::load(f.query);
  const int64_t H = cfg.cache.num_kv_heads, D = cfg.cache.head_size;
  const SafetensorsTensor& query = q.at("query");
  if ((query.dtype != DType::bf16 && query.dtype != DType::f16) || query.shape.size() != 3 ||
      query.shape[2] != D || query.shape[1] < 1 || query.shape[1] % H != 0) {
    bad_tensor(q, "query", query,
               fmt::format("BF16 or F16 [num_seqs, num_q_heads, {}] with num_q_heads a multiple "
                           "of num_kv_heads {} (the config's head_size and num_kv_heads)",
                           D, H));
  }
  const int64_t S = query.shape[0], Hq = query.shape[1];
  const SafetensorsTensor& tables = q.at("block_tables");
  if (tables.dtype != DType::i32 || tables.shape.size() != 2 || tables.shape[0] != S) {
    bad_tensor(q, "block_tables", tables,
               fmt::format("I32 [{}, max_blocks_per_seq] (num_seqs of query)", S));
  }
  const SafetensorsTensor& lens = q.at("seq_lens");
  if (lens.dtype != DType::i32 || lens.shape != std::vector<int64_t>{S}) {
    bad_tensor(q, "seq_lens", lens, fmt::format("I32 [{}] (num_seqs of query)", S));
  }
  const float k_scale =
      optional_scale(q, "k_scale").value_or(cache.k_scale.value_or(cfg.cache.k_scale));
  const float v_scale =
      optional_scale(q, "v_scale").value_or(cache.v_scale.value_or(cfg.cache.v_scale));
  const float softmax_scale = optional_scale(q, "softmax_scale").value_or(0.0f);
  std::vector<float> out;
  if (!try_resize(out, static_cast<size_t>(S * Hq * D))) {
    throw Error(ErrorCode::runtime, fmt::format("{}: an output F32 [{}, {}, {}] does not fit in "
                                                "host memory",
                                                q.source(), S, Hq, D));
  }

  OpenedBackend opened =
      open_backend(cfg, f.backend.empty() ? std::nullopt : std::optional<std::string>(f.backend));
  const std::string& name = opened.backend.info().name;
  if (!opened.backend.has_attention()) {
    throw Error(ErrorCode::unavailable,
                fmt::format("backend {} has no decode attention (kvq backends lists the "
                            "plugins; reference_cpu has it)",
                            name));
  }
  const auto attention =
      at_config_keys(cfg, [&] { return opened.backend.make_attention(opened.options); });
  TensorStaging staging(
      at_config_keys(cfg, [&] { return opened.backend.make_runtime(opened.options); }));
  check_same_device(name, "attention", attention->device(), staging.device());
  uint64_t workspace_bytes = 0;
  throw_if_failed(attention->workspace_bytes(S, Hq, tables.shape[1], &workspace_bytes), f.query,
                  name);
  std::vector<uint8_t> workspace(workspace_bytes);

  const TensorView host_out = make_view(out.data(), DType::f32, {S, Hq, D});
  AttentionArgs args;
  args.query = staging.upload(query.view(), "query");
  args.block_tables = staging.upload(tables.view(), "block_tables");
  args.seq_lens = staging.upload(lens.view(), "seq_lens");
  args.cache = staging.upload(cache_view(*layout, cache.bytes.data()), "the cache");
  args.output = staging.upload(host_out, "output");
  if (workspace_bytes > 0) {
    args.workspace = staging.upload(
        make_view(workspace.data(), DType::u8, {static_cast<int64_t>(workspace_bytes)}),
        "the workspace");
  }
  args.k_scale = k_scale;
  args.v_scale = v_scale;
  args.softmax_scale = softmax_scale;
  args.stream = staging.stream();
  throw_if_failed(attention->attend(args), f.query, name);
  AttentionOutOfRange skipped;
  throw_if_error(attention->take_out_of_range(&skipped));
  staging.download(args.output, host_out, "output");
  if (skipped.block_ids > 0 || skipped.seq_lens > 0) {  // only device backends get here
    throw Error(ErrorCode::out_of_range,
                fmt::format("{}: {} block ids outside the cache and {} seq_lens past the block "
                            "table were skipped by {}",
                            f.query, skipped.block_ids, skipped.seq_lens, name));
  }

  save_safetensors(f.output, {{"output", host_out}});
  std::cout << fmt::format(
                   "{}: attended {} sequences x {} query heads over {} with {} into {} "
                   "(k_scale {}, v_scale {})",
                   f.query, S, Hq, f.cache, name, f.output, k_scale, v_scale)
            << "\n";
  return kExitOk;
}

}  // namespace

void add_attend_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "attend", "Decode attention of one query token per sequence over a cache file's pages");
  auto f = std::make_shared<AttendFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (must match the cache's layout)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--cache", f->cache, "Cache file from kvq write (kv_cache + layout metadata)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--query", f->query,
                  "safetensors with query [S, Hq, D] BF16|F16, block_tables [S, M] I32, "
                  "seq_lens [S] I32; optional k_scale, v_scale, softmax_scale F32")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--output", f->output, "safetensors to write: output F32 [S, Hq, D]")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--backend", f->backend, "Backend plugin to use instead of the config's")
      ->check(kNonEmpty)
      ->type_name("NAME");
  f->common = add_common_flags(*sub);
  sub->callback([&run, f] { run = [f] { return run_attend(*f); }; });
}

}  // namespace kvq::app
