#include "bench_report.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <ostream>

#include "bench_data.h"
#include "kvq/core/version.h"

namespace kvq::app::bench {
namespace {

using nlohmann::json;

json timing_json(const TimingSummary& t, const Measurement& m, double copy_bps) {
  const double gbps = gigabytes_per_second(m.bytes.total(), t.median_ms);
  const double gbps_all_rows = gigabytes_per_second(m.bytes_all_rows.total(), t.median_ms);
  return json{{"iterations", t.iterations},
              {"ms", {{"median", t.median_ms}, {"min", t.min_ms}, {"max", t.max_ms}}},
              {"gbps", gbps},
              {"percent_of_copy", percent_of_copy(gbps, copy_bps)},
              {"percent_of_copy_all_rows", percent_of_copy(gbps_all_rows, copy_bps)},
              {"samples_ms", t.samples_ms}};
}

json measurement_json(const std::optional<Measurement>& m, double copy_bps) {
  if (!m) return nullptr;
  json j = timing_json(m->direct, *m, copy_bps);
  j["bytes"] = {{"read", m->bytes.read},
                {"written", m->bytes.written},
                {"total", m->bytes.total()},
                {"all_rows_total", m->bytes_all_rows.total()}};
  j["sets"] = m->sets;
  const double gbps = gigabytes_per_second(m->bytes.total(), m->direct.median_ms);
  j["same_size_copy"] = {
      {"gbps", m->same_size_copy_bps * 1e-9},
      {"percent_of_copy", percent_of_copy(m->same_size_copy_bps * 1e-9, copy_bps)},
      {"measured_percent_of_it", percent_of_copy(gbps, m->same_size_copy_bps)}};
  j["graph"] = m->graph ? timing_json(*m->graph, *m, copy_bps) : json(nullptr);
  if (!m->graph) j["graph_note"] = m->graph_note;
  return j;
}

std::string shape_words(const Case& c) {
  std::string s =
      fmt::format("H={} D={} bs={} T={}", c.num_kv_heads, c.head_size, c.block_size, c.tokens);
  if (c.threads > 0) s += fmt::format(" threads={}", c.threads);
  return s;
}

std::string side_words(const char* name, const std::optional<Measurement>& m, double copy_bps) {
  if (!m) return "";
  const double gbps = gigabytes_per_second(m->bytes.total(), m->direct.median_ms);
  std::string s = fmt::format("{} {:.1f} us {:.1f} GB/s {:.1f}%", name, m->direct.median_ms * 1e3,
                              gbps, percent_of_copy(gbps, copy_bps));
  if (m->graph) s += fmt::format(" (graph {:.1f} us)", m->graph->median_ms * 1e3);
  return s;
}

}  // namespace

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double percent_of_copy(double gb_per_s, double copy_bytes_per_s) {
  return copy_bytes_per_s > 0 ? 100.0 * gb_per_s * 1e9 / copy_bytes_per_s : 0.0;
}

json to_json(const RunInfo& info, const std::vector<CaseResult>& results, bool complete) {
  const double copy = info.copy_bytes_per_s;
  json cases = json::array();
  for (const CaseResult& r : results) {
    cases.push_back({
        {"shape", {{"num_kv_heads", r.c.num_kv_heads}, {"head_size", r.c.head_size}}},
        {"block_size", r.c.block_size},
        {"tokens", r.c.tokens},
        {"threads", r.c.threads > 0 ? json(r.c.threads) : json(nullptr)},
        {"valid_tokens", r.valid_tokens},
        {"padding_tokens", r.padding_tokens},
        {"num_blocks", r.num_blocks},
        {"page_bytes", r.page_bytes},
        {"write", measurement_json(r.write, copy)},
        {"read", measurement_json(r.read, copy)},
        {"error", r.error.empty() ? json(nullptr) : json(r.error)},
    });
  }
  const Settings& s = info.settings;
  return json{
      {"tool", "kvq bench"},
      {"kvq_version", KVQ_VERSION_STRING},
      {"date", info.date},
      {"command", info.command},
      {"config",
       {{"file", info.config_file},
        {"backend", info.backend},
        {"backend_version", info.backend_version},
        {"format", info.cache.format},
        {"layout",
         {{"order", info.cache.layout.order},
          {"k_scales", info.cache.layout.k_scales},
          {"v_scales", info.cache.layout.v_scales}}},
        {"k_scale", info.cache.k_scale},
        {"v_scale", info.cache.v_scale}}},
      {"device", {{"id", to_string(info.device)}, {"name", info.device_name}}},
      {"copy_bandwidth",
       {{"bytes", info.copy_bytes},
        {"gbps", copy / 1e9},
        {"counts", "bytes read + bytes written, median of timed device-to-device copies"}}},
      {"settings",
       {{"warmup", s.warmup},
        {"iterations", s.iterations},
        {"rotation_bytes", s.rotation_bytes},
        {"graph_max_tokens", s.graph_max_tokens},
        {"graph_launches_per_replay", s.graph_launches},
        {"padding_percent", kPaddingPercent},
        {"fused_qkv_query_heads",
         s.fused_qkv_query_heads ? json(*s.fused_qkv_query_heads) : json(nullptr)},
        {"input_dtype", "bf16"},
        {"slot_dtype", "i64"},
        {"reader_output_dtype", "f32"},
        {"bytes_rule",
         "write: 2*valid*H*D*2 read + 2*valid*H*(D/2+D/16) written + 8*T slot bytes; read: "
         "2*valid*H*(D/2+D/16) + 8*T read, 2*T*H*D*4 written; *_all_rows: the same with "
         "valid = T (issue 7's formula, padding rows counted)"}}},
      {"complete", complete},
      {"cases", std::move(cases)},
  };
}

std::string progress_line(std::size_t index, std::size_t count, const CaseResult& r,
                          double copy_bytes_per_s) {
  std::string line = fmt::format("[{:>{}}/{}] {}: ", index + 1, fmt::format("{}", count).size(),
                                 count, shape_words(r.c));
  if (!r.error.empty()) return line + "FAILED: " + r.error;
  line += side_words("write", r.write, copy_bytes_per_s);
  if (r.read) line += " | " + side_words("read", r.read, copy_bytes_per_s);
  return line;
}

void print_table(std::ostream& out, const RunInfo& info, const std::vector<CaseResult>& results) {
  const double copy = info.copy_bytes_per_s;
  out << fmt::format("kvq bench: {} on {} ({}), layout {} K {} V {}\n", info.backend,
                     info.device_name, to_string(info.device), info.cache.layout.order,
                     info.cache.layout.k_scales, info.cache.layout.v_scales);
  out << fmt::format("copy bandwidth: {:.1f} GB/s ({} MiB {}, read + written)\n", copy / 1e9,
                     info.copy_bytes >> 20,
                     info.device.is_cuda() ? "device-to-device copy" : "memcpy");
  if (const auto& q = info.settings.fused_qkv_query_heads) {
    out << fmt::format("inputs: K and V views of a fused QKV output, [T, ({} + 2H) x D]\n", *q);
  }
  out << fmt::format(
      "{:>4} {:>4} {:>4} {:>6} {:>3} | {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} | "
      "{:>9} {:>9} {:>8} {:>6}\n",
      "H", "D", "bs", "T", "thr", "write us", "min", "max", "graph", "GB/s", "%copy", "read us",
      "graph", "GB/s", "%copy");
  for (const CaseResult& r : results) {
    const Case& c = r.c;
    std::string head =
        fmt::format("{:>4} {:>4} {:>4} {:>6} {:>3}", c.num_kv_heads, c.head_size, c.block_size,
                    c.tokens, c.threads > 0 ? fmt::format("{}", c.threads) : "-");
    if (!r.error.empty()) {
      out << head << " | FAILED: " << r.error << "\n";
      continue;
    }
    auto graph_us = [](const std::optional<Measurement>& m) {
      return m && m->graph ? fmt::format("{:.1f}", m->graph->median_ms * 1e3) : std::string("-");
    };
    std::string w = "-";
    if (r.write) {
      const auto& d = r.write->direct;
      const double gbps = gigabytes_per_second(r.write->bytes.total(), d.median_ms);
      w = fmt::format("{:>9.1f} {:>9.1f} {:>9.1f} {:>9} {:>8.1f} {:>6.1f}", d.median_ms * 1e3,
                      d.min_ms * 1e3, d.max_ms * 1e3, graph_us(r.write), gbps,
                      percent_of_copy(gbps, copy));
    }
    std::string rd = fmt::format("{:>9} {:>9} {:>8} {:>6}", "-", "-", "-", "-");
    if (r.read) {
      const auto& d = r.read->direct;
      const double gbps = gigabytes_per_second(r.read->bytes.total(), d.median_ms);
      rd = fmt::format("{:>9.1f} {:>9} {:>8.1f} {:>6.1f}", d.median_ms * 1e3, graph_us(r.read),
                       gbps, percent_of_copy(gbps, copy));
    }
    out << head << " | " << w << " | " << rd << "\n";
  }
}

}  // namespace kvq::app::bench
