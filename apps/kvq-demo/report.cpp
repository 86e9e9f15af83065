#include "report.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <ostream>

#include "cache_content.h"

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
  // Every allocation took a page never used before (pages_distinct) or one freed earlier.
  line("pages",
       fmt::format("{} of {} in use at the peak ({} bytes each); {} allocations used "
                   "{} distinct pages ({} took a page another sequence had freed); {} in "
                   "use at the end, {} leaked",
                   r.pages_used, r.pages_total, r.page_bytes, r.pages_distinct + r.pages_reused,
                   r.pages_distinct, r.pages_reused, r.pages_in_use_at_end, r.blocks_leaked));
  if (r.shards.size() > 1) {
    line("shards", fmt::format("{} (tensor parallel), {} KV head{} each, every write issued to all "
                               "shards before any is synchronized",
                               r.shards.size(), r.shards.front().num_heads,
                               r.shards.front().num_heads == 1 ? "" : "s"));
    for (std::size_t i = 0; i < r.shards.size(); ++i) {
      const ShardResult& sh = r.shards[i];
      line(fmt::format("shard {}", i),
           fmt::format("{} on {} ({}): {} pages at the peak x {} bytes = {} bytes (cache {} bytes)",
                       sh.num_heads == 1 ? fmt::format("KV head {}", sh.head_begin)
                                         : fmt::format("KV heads {}..{}", sh.head_begin,
                                                       sh.head_begin + sh.num_heads - 1),
                       sh.device, sh.device_name, sh.pages_used, sh.page_bytes, sh.bytes_used,
                       sh.cache_bytes));
    }
  }
  line("memory", fmt::format("{:g} bytes per token in {} vs {:g} in bf16: {:.2f}x smaller",
                             r.bytes_per_token, r.format == "nvfp4" ? "NVFP4" : r.format,
                             r.bytes_per_token_bf16, r.compression_vs_bf16));
  line("accuracy", fmt::format("K rel L2 error {:.4f}, V rel L2 error {:.4f} (every token written)",
                               r.k_rel_error, r.v_rel_error));
  line("attention",
       fmt::format("rel L2 error {:.4f}, cosine {:.6f} over {} queries (one per query head "
                   "and sequence, GQA {}:1), f32 attention on dequantized vs original K/V",
                   r.attention_rel_error, r.attention_cosine, r.attention_queries,
                   r.query_heads_per_kv_head));
  const GpuAttentionResult& g = r.gpu_attention;
  if (!g.ran) {
    line("gpu attention",
         fmt::format("none: {}; attention is measured on the host only (above)", g.reason));
  } else {
    const int64_t shards = g.steps > 0 ? g.calls / g.steps : 0;
    line("gpu attention",
         fmt::format("{} calls{}, {:.1f} us per step (median), {:.3f} GB/s, rel error {:.4f}, "
                     "cosine {:.6f} over {} sampled steps ({} queries, {}): the backend's "
                     "attention on the cache after each decode write vs f32 attention on the "
                     "original K/V",
                     g.calls,
                     shards > 1 ? fmt::format(" ({} decode steps x {} shards)", g.steps, shards)
                                : std::string(),
                     g.us_per_step_median, g.gb_per_s, g.rel_error, g.cosine, g.checked_steps,
                     g.checked_queries,
                     g.check_every == 1 ? std::string("every step")
                                        : fmt::format("1 step in {}", g.check_every)));
  }
  line("throughput", fmt::format("{}tokens/s, {:.3f} GB/s of bf16 K/V input ({:.3f} s in writes)",
                                 si(r.write_tokens_per_s), r.write_gb_per_s, r.write_seconds));
  line("wall time", fmt::format("{:.2f} s", r.wall_s));
  line("cache hash", fmt::format("{} (FNV-1a 64 of every KV head's pages in head order, the "
                                 "same for any --tensor-parallel)",
                                 hex64(r.cache_hash)));
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

// Every number print_report shows (the text report and the JSON must not disagree on what a run
// did: a JSON alone reproduces it, seed and workload included).
nlohmann::ordered_json to_json(const DemoResult& r) {
  nlohmann::ordered_json j;
  j["backend"] = r.backend;
  j["backend_version"] = r.backend_version;
  j["device"] = r.device;
  j["cache"] = {{"format", r.format},       {"num_kv_heads", r.num_kv_heads},
                {"head_size", r.head_size}, {"block_size", r.block_size},
                {"order", r.order},         {"k_scales", r.k_scales},
                {"v_scales", r.v_scales},   {"k_scale", r.k_scale},
                {"v_scale", r.v_scale},     {"page_bytes", r.page_bytes}};
  j["workload"] = {{"seed", r.seed},
                   {"sequences", r.sequences},
                   {"max_batch", r.max_batch},
                   {"prompt_tokens", {r.prompt_min, r.prompt_max}},
                   {"decode_tokens", {r.decode_min, r.decode_max}},
                   {"query_heads_per_kv_head", r.query_heads_per_kv_head},
                   {"sequences_finished", r.sequences_finished},
                   {"sequences_live_at_end", r.sequences_live_at_end}};
  j["tokens_written"] = r.tokens_written;
  j["prefill_writes"] = r.prefill_writes;
  j["decode_writes"] = r.decode_writes;
  j["padding_slots"] = r.padding_slots;
  j["pages_used"] = r.pages_used;
  j["pages_total"] = r.pages_total;
  j["pages_distinct"] = r.pages_distinct;
  j["pages_reused"] = r.pages_reused;
  j["pages_in_use_at_end"] = r.pages_in_use_at_end;
  j["bytes_per_token"] = r.bytes_per_token;
  j["bytes_per_token_bf16"] = r.bytes_per_token_bf16;
  j["compression_vs_bf16"] = r.compression_vs_bf16;
  j["k_rel_error"] = r.k_rel_error;
  j["v_rel_error"] = r.v_rel_error;
  j["attention_rel_error"] = r.attention_rel_error;
  j["attention_cosine"] = r.attention_cosine;
  j["attention_queries"] = r.attention_queries;
  const GpuAttentionResult& g = r.gpu_attention;
  j["gpu_attention"] = g.ran;
  if (!g.ran) {
    j["gpu_attention_reason"] = g.reason;
  } else {
    j["gpu_attention_steps"] = g.steps;
    j["gpu_attention_calls"] = g.calls;
    j["gpu_attention_us_per_step"] = g.us_per_step_median;
    j["gpu_attention_seconds"] = g.seconds;
    j["gpu_attention_bytes"] = g.bytes;
    j["gpu_attention_gb_per_s"] = g.gb_per_s;
    j["gpu_attention_check_every"] = g.check_every;
    j["gpu_attention_checked_steps"] = g.checked_steps;
    j["gpu_attention_checked_queries"] = g.checked_queries;
    j["gpu_attention_rel_error"] = g.rel_error;
    j["gpu_attention_cosine"] = g.cosine;
  }
  j["write_tokens_per_s"] = r.write_tokens_per_s;
  j["write_gb_per_s"] = r.write_gb_per_s;
  j["write_seconds"] = r.write_seconds;
  j["wall_s"] = r.wall_s;
  j["blocks_leaked"] = r.blocks_leaked;
  if (r.verify) {
    j["verify_reference"] = r.verify->reference;
    j["verify_bytes_compared"] = r.verify->bytes_compared;
    j["verify_differing_bytes"] = r.verify->differing_bytes;
    j["verify_first_difference"] = r.verify->first_difference;  // whole-cache byte, -1: none
  }
  j["cache_fnv1a64"] = hex64(r.cache_hash);
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const ShardResult& sh : r.shards) {
    nlohmann::ordered_json o;
    o["device"] = sh.device;
    o["device_name"] = sh.device_name;
    o["kv_heads"] = {sh.head_begin, sh.head_begin + sh.num_heads};
    o["pages_used"] = sh.pages_used;
    o["page_bytes"] = sh.page_bytes;
    o["bytes_used"] = sh.bytes_used;
    o["cache_bytes"] = sh.cache_bytes;
    nlohmann::ordered_json hashes = nlohmann::ordered_json::array();
    for (uint64_t h : sh.head_hashes) hashes.push_back(hex64(h));
    o["head_fnv1a64"] = hashes;
    shards.push_back(o);
  }
  j["shards"] = shards;
  if (r.timeline) {
    const TimelineResult& t = *r.timeline;
    nlohmann::ordered_json o;
    o["writes"] = t.writes;
    o["overlap_s"] = t.overlap_s;
    o["write_s"] = t.write_s;
    o["shard_busy_s"] = t.shard_busy_s;
    o["shard_issue_s"] = t.shard_issue_s;
    nlohmann::ordered_json largest = nlohmann::ordered_json::array();
    for (const TimelineWrite& w : t.largest) {
      nlohmann::ordered_json jw;
      jw["write"] = w.index;
      jw["tokens"] = w.tokens;
      jw["kind"] = w.prefill ? "prefill" : "decode";
      nlohmann::ordered_json ss = nlohmann::ordered_json::array();
      for (const TimelineShard& sh : w.shards) {
        ss.push_back(
            {{"start_us", sh.start_us}, {"issued_us", sh.issued_us}, {"end_us", sh.end_us}});
      }
      jw["shards"] = ss;
      largest.push_back(jw);
    }
    o["largest"] = largest;
    j["timeline"] = o;
  }
  return j;
}

void print_timeline(std::ostream& out, const DemoResult& r) {
  if (!r.timeline) return;
  const TimelineResult& t = *r.timeline;
  fmt::print(out,
             "timeline (host steady clock, us since the run started; start: before the shard's "
             "write was issued, issued: when its write() returned, end: when its synchronize() "
             "returned; all shards are issued, then synchronized, in shard order)\n");
  fmt::print(out, "  {} writes to {} shard{}: {:.6f} s in writes (first start to last end)",
             t.writes, t.shard_busy_s.size(), t.shard_busy_s.size() == 1 ? "" : "s", t.write_s);
  if (t.shard_busy_s.size() > 1) {
    fmt::print(out,
               ", {:.6f} s ({:.1f}%) of it with every shard's write issued and none finished yet",
               t.overlap_s, t.write_s > 0 ? 100.0 * t.overlap_s / t.write_s : 0.0);
  }
  fmt::print(out, "\n");
  for (std::size_t i = 0; i < t.shard_busy_s.size(); ++i) {
    fmt::print(out, "  shard {} on {}: {:.6f} s from start to end, {:.6f} s of it in write()\n", i,
               i < r.shards.size() ? r.shards[i].device : "?", t.shard_busy_s[i],
               t.shard_issue_s[i]);
  }
  fmt::print(out, "  the {} largest writes:\n", t.largest.size());
  fmt::print(out, "  {:>7} {:>7} {:>8} {:>5} {:>8} {:>13} {:>13} {:>13}\n", "write", "tokens",
             "kind", "shard", "device", "start_us", "issued_us", "end_us");
  for (const TimelineWrite& w : t.largest) {
    for (std::size_t i = 0; i < w.shards.size(); ++i) {
      const TimelineShard& sh = w.shards[i];
      const std::string device = i < r.shards.size() ? r.shards[i].device : "?";
      if (i == 0) {
        fmt::print(out, "  {:>7} {:>7} {:>8} ", w.index, w.tokens,
                   w.prefill ? "prefill" : "decode");
      } else {
        fmt::print(out, "  {:>7} {:>7} {:>8} ", "", "", "");
      }
      fmt::print(out, "{:>5} {:>8} {:>13.1f} {:>13.1f} {:>13.1f}\n", i, device, sh.start_us,
                 sh.issued_us, sh.end_us);
    }
  }
}

}  // namespace kvq::demo

namespace kvq::demo {

void print_format_table(std::ostream& out, const std::vector<DemoResult>& results,
                        uint64_t budget_bytes) {
  if (results.empty()) return;
  const DemoResult& first = results.front();
  fmt::print(out,
             "kvq-demo --formats: one workload ({} sequences, seed {}, {} tokens written) through "
             "{} on {}; {} KV heads x head_size {}\n",
             first.sequences, first.seed, first.tokens_written, first.backend, first.device,
             first.num_kv_heads, first.head_size);
  fmt::print(out, "capacity: tokens that fit in {} bytes (the config's cache)\n\n", budget_bytes);
  fmt::print(out, "  {:<9} {:>9} {:>8} {:>11} {:>8} {:>8} {:>9} {:>10} {:>10} {:>9}\n", "format",
             "bytes/tok", "vs bf16", "capacity", "K err", "V err", "attn err", "attn cos",
             "tokens/s", "GB/s in");
  for (const DemoResult& r : results) {
    const auto capacity =
        static_cast<uint64_t>(static_cast<double>(budget_bytes) / r.bytes_per_token);
    fmt::print(
        out,
        "  {:<9} {:>9g} {:>7.2f}x {:>11} {:>8.4f} {:>8.4f} {:>9.4f} {:>10.6f} {:>10} {:>9.3f}\n",
        r.format, r.bytes_per_token, r.compression_vs_bf16, capacity, r.k_rel_error, r.v_rel_error,
        r.attention_rel_error, r.attention_cosine, si(r.write_tokens_per_s), r.write_gb_per_s);
  }
  fmt::print(out,
             "\nerrors: relative L2 over every token written; attention: f32 attention on the "
             "read-back K/V vs on the original rows. Scales: the config's for its own format, 1 "
             "for the others (bf16 takes none).\n");
}

nlohmann::ordered_json formats_json(const std::vector<DemoResult>& results, uint64_t budget_bytes) {
  nlohmann::ordered_json j;
  j["budget_bytes"] = budget_bytes;
  j["formats"] = nlohmann::ordered_json::array();
  for (const DemoResult& r : results) {
    nlohmann::ordered_json one = to_json(r);
    one["capacity_tokens"] =
        static_cast<uint64_t>(static_cast<double>(budget_bytes) / r.bytes_per_token);
    j["formats"].push_back(one);
  }
  return j;
}

}  // namespace kvq::demo
