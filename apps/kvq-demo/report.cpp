#include "report.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <ostream>

namespace kvq::demo {

namespace {

std::string si(double v) {
  if (v >= 1e9) return fmt::format("{:.2f} G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f} M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f} k", v / 1e3);
  return fmt::format("{:.0f} ", v);
}

}  // namespace

void print_report(std::ostream& out, const DemoResult& r) {
  auto line = [&out](std::string_view label, const std::string& text) {
    fmt::print(out, "  {:<11} {}\n", label, text);
  };
  fmt::print(out, "kvq-demo: {} paged KV cache, prefill + decode, read back and attended\n",
             r.format == "nvfp4" ? "NVFP4" : r.format);
  line("backend", fmt::format("{} {} on {}", r.backend, r.backend_version, r.device));
  line("cache", fmt::format("{} KV heads x head_size {}, block_size {}, {}, K scales {}, "
                            "V scales {}, k_scale {}, v_scale {}",
                            r.num_kv_heads, r.head_size, r.block_size, r.order, r.k_scales,
                            r.v_scales, r.k_scale, r.v_scale));
  line("workload", fmt::format("{} sequences, batch {}, prompts {}..{} tokens, decode {}..{} "
                               "tokens, seed {}",
                               r.sequences, r.max_batch, r.prompt_min, r.prompt_max, r.decode_min,
                               r.decode_max, r.seed));
  line("", fmt::format("{} finished and freed on the way, {} live at the end", r.sequences_finished,
                       r.sequences_live_at_end));
  line("writes", fmt::format("{} tokens: {} prefill writes + {} decode writes ({} padding slots)",
                             r.tokens_written, r.prefill_writes, r.decode_writes, r.padding_slots));
  line("pages", fmt::format("{} of {} in use at the peak ({} bytes each); {} used in all, "
                            "{} reused after a free; {} in use at the end, {} leaked",
                            r.pages_used, r.pages_total, r.page_bytes, r.pages_distinct,
                            r.pages_reused, r.pages_in_use_at_end, r.blocks_leaked));
  line("memory",
       fmt::format("{:g} bytes per token in NVFP4 vs {:g} in bf16: {:.2f}x smaller",
                   r.bytes_per_token_nvfp4, r.bytes_per_token_bf16, r.compression_vs_bf16));
  line("accuracy", fmt::format("K rel L2 error {:.4f}, V rel L2 error {:.4f} (every token written)",
                               r.k_rel_error, r.v_rel_error));
  line("attention",
       fmt::format("rel L2 error {:.4f}, cosine {:.6f} ({} query heads x sequences, GQA {}:1, f32 "
                   "on dequantized vs original K/V)",
                   r.attention_rel_error, r.attention_cosine, r.attention_queries,
                   r.query_heads_per_kv_head));
  line("throughput", fmt::format("{}tokens/s, {:.3f} GB/s of bf16 K/V input ({:.3f} s in writes)",
                                 si(r.write_tokens_per_s), r.write_gb_per_s, r.write_seconds));
  line("wall time", fmt::format("{:.2f} s", r.wall_s));
  if (r.verify) {
    const VerifyResult& v = *r.verify;
    if (v.differing_bytes == 0) {
      line("verify", fmt::format("cache bytes equal to {}'s ({} bytes compared)", v.reference,
                                 v.bytes_compared));
    } else {
      line("verify",
           fmt::format("{} of {} cache bytes DIFFER from {}'s (first at byte {})",
                       v.differing_bytes, v.bytes_compared, v.reference, v.first_difference));
    }
  }
}

nlohmann::ordered_json to_json(const DemoResult& r) {
  nlohmann::ordered_json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["tokens_written"] = r.tokens_written;
  j["pages_used"] = r.pages_used;
  j["pages_total"] = r.pages_total;
  j["bytes_per_token_nvfp4"] = r.bytes_per_token_nvfp4;
  j["bytes_per_token_bf16"] = r.bytes_per_token_bf16;
  j["compression_vs_bf16"] = r.compression_vs_bf16;
  j["k_rel_error"] = r.k_rel_error;
  j["v_rel_error"] = r.v_rel_error;
  j["attention_rel_error"] = r.attention_rel_error;
  j["attention_cosine"] = r.attention_cosine;
  j["write_tokens_per_s"] = r.write_tokens_per_s;
  j["write_gb_per_s"] = r.write_gb_per_s;
  j["wall_s"] = r.wall_s;
  j["blocks_leaked"] = r.blocks_leaked;
  if (r.verify) j["verify_differing_bytes"] = r.verify->differing_bytes;
  return j;
}

}  // namespace kvq::demo
