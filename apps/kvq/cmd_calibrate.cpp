// kvq calibrate CONFIG --input KV.safetensors [--json FILE]: the dequantization scales
// (cache.k_scale, cache.v_scale) the config's format wants for the rows in KV (key, value
// [T, H, D], BF16|F16|F32), per side and per head, with the round-trip error each gives, next
// to what the other common conventions would give.
//   nvfp4:    scale = amax / (6 x 448) = amax / 2688, amax over the side's rows: the group with
//             the largest magnitude then gets scale byte 448 (E4M3's largest), and every group's
//             scale byte amax_group / amax x 448 spans E4M3's range (vLLM's NVFP4 checkpoints,
//             ModelOpt).
//   fp8_e4m3: scale = amax / 448 (vLLM's FP8 KV-cache rule: amax lands on E4M3's largest value).
//   fp8_e5m2: scale = amax / 57344 (the same for E5M2).
// bf16 pages are not scaled: nothing to calibrate. The error is the config format's round trip
// through the layouts library's codec (the definition every backend writes): relative L2 error
// ||x - x'|| / ||x|| and max |x - x'| over the side's elements.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "float_rows.h"
#include "kvq/io/cache_file.h"
#include "kvq/io/file_io.h"
#include "kvq/io/safetensors.h"
#include "kvq/layouts/element_quantize.h"
#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq::app {
namespace {

constexpr float kE4m3Max = 448.0f, kE2m1Max = 6.0f, kE5m2Max = 57344.0f;

// A format's calibration rule: scale = amax / divisor.
struct Rule {
  int32_t format;        // enum kvq_format
  float divisor;         // 2688, 448, 57344
  const char* text;      // "amax / 2688 (amax / (6 x 448))"
  const char* headline;  // the line under the input's description
};

const Rule& rule_for(int32_t format, const std::string& config) {
  static const Rule rules[] = {
      {KVQ_FORMAT_NVFP4, kE2m1Max * kE4m3Max, "amax / 2688 (amax / (6 x 448))",
       "scale = amax / (6 x 448) = amax / 2688 (the largest group gets scale byte 448, E4M3's "
       "largest)"},
      {KVQ_FORMAT_FP8_E4M3, kE4m3Max, "amax / 448",
       "scale = amax / 448 (the largest element lands on E4M3's largest value)"},
      {KVQ_FORMAT_FP8_E5M2, kE5m2Max, "amax / 57344",
       "scale = amax / 57344 (the largest element lands on E5M2's largest value)"},
  };
  for (const Rule& r : rules) {
    if (r.format == format) return r;
  }
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}: cache.format {}: its pages are not scaled, nothing to calibrate",
                          config, kvq_format_name(format)));
}

struct CalibrateFlags {
  std::string config, input, json;
  std::shared_ptr<CommonFlags> common;
};

// Rows [T, H, D] as floats, one side.
struct Rows {
  std::vector<float> x;
  int64_t T = 0, H = 0, D = 0;
};

// amax over head `head` (or every head when head < 0); NaN and infinities are skipped.
float amax_of(const Rows& r, int64_t head) {
  float amax = 0.0f;
  for (int64_t t = 0; t < r.T; ++t) {
    for (int64_t h = head < 0 ? 0 : head; h < (head < 0 ? r.H : head + 1); ++h) {
      const float* row = r.x.data() + (t * r.H + h) * r.D;
      for (int64_t e = 0; e < r.D; ++e) {
        if (std::isfinite(row[e])) amax = std::max(amax, std::abs(row[e]));
      }
    }
  }
  return amax;
}

// The round trip of one per-element format, head `head` (every head when < 0).
template <int Format>
ErrorFigures element_round_trip(const Rows& r, int64_t head, float scale) {
  using Codec = ElementCodec<Format>;
  ErrorAccumulator acc;
  for (int64_t t = 0; t < r.T; ++t) {
    for (int64_t h = head < 0 ? 0 : head; h < (head < 0 ? r.H : head + 1); ++h) {
      const float* row = r.x.data() + (t * r.H + h) * r.D;
      for (int64_t e = 0; e < r.D; ++e)
        acc.add(row[e], Codec::decode(Codec::encode(row[e], scale), scale));
    }
  }
  return acc.figures();
}

// The NVFP4 round trip of head `head` (every head when < 0) with dequantization scale `scale`.
ErrorFigures nvfp4_round_trip(const Rows& r, int64_t head, float scale) {
  const float global = nvfp4_global_scale(scale);
  ErrorAccumulator acc;
  for (int64_t t = 0; t < r.T; ++t) {
    for (int64_t h = head < 0 ? 0 : head; h < (head < 0 ? r.H : head + 1); ++h) {
      const float* row = r.x.data() + (t * r.H + h) * r.D;
      for (int64_t g = 0; g < r.D / kNvfp4GroupSize; ++g) {
        const float* x = row + g * kNvfp4GroupSize;
        const Nvfp4Group q = nvfp4_quantize_group(x, global);
        for (int k = 0; k < kNvfp4GroupSize; ++k) {
          const uint8_t code = static_cast<uint8_t>(q.data[k / 2] >> (4 * (k % 2)));
          acc.add(x[k], nvfp4_dequantize(code & 0xF, q.scale, scale));
        }
      }
    }
  }
  return acc.figures();
}

ErrorFigures round_trip(int32_t format, const Rows& r, int64_t head, float scale) {
  switch (format) {
    case KVQ_FORMAT_FP8_E4M3: return element_round_trip<KVQ_FORMAT_FP8_E4M3>(r, head, scale);
    case KVQ_FORMAT_FP8_E5M2: return element_round_trip<KVQ_FORMAT_FP8_E5M2>(r, head, scale);
    default: return nvfp4_round_trip(r, head, scale);
  }
}

// A scale from amax by a rule; 1.0 for rows of zeros (any usable scale writes zeros exactly).
float scale_for(float amax, float divisor) {
  const float s = amax / divisor;
  return nvfp4_scale_usable(s) ? s : 1.0f;
}

struct Candidate {
  std::string rule;  // "nvfp4: amax / 2688"
  float scale = 0;
  ErrorFigures error;
};

nlohmann::json to_json(const Candidate& c) {
  return {{"rule", c.rule},
          {"scale", c.scale},
          {"relative_error", c.error.relative},
          {"max_error", c.error.max}};
}

Rows load_side(const SafetensorsFile& in, const char* name, const Config& cfg,
               const std::string& config) {
  const SafetensorsTensor& t = in.at(name);
  const int64_t H = cfg.cache.num_kv_heads, D = cfg.cache.head_size;
  if (t.shape.size() != 3 || t.shape[1] != H || t.shape[2] != D) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: tensor '{}': shape {}: expected [num_tokens, {}, {}] "
                            "(num_kv_heads and head_size of {})",
                            in.source(), name, shape_text(t.shape), H, D, config));
  }
  return {to_floats(t, in.source()), t.shape[0], H, D};
}

int run_calibrate(const CalibrateFlags& f) {
  auto [cfg, layout] = load_checked_config(f.config);
  apply_logging(cfg, *f.common);
  const int32_t format = layout->descriptor().format;
  const Rule& rule = rule_for(format, f.config);
  if (!f.json.empty()) {
    check_distinct(f.json, "--json", f.config, "CONFIG");
    check_distinct(f.json, "--json", f.input, "--input");
    check_writable(f.json, "--json");
  }
  const SafetensorsFile in = SafetensorsFile::load(f.input);
  const Rows sides[2] = {load_side(in, "key", cfg, f.config),
                         load_side(in, "value", cfg, f.config)};
  const char* names[2] = {"k_scale", "v_scale"};
  const float configured[2] = {cfg.cache.k_scale, cfg.cache.v_scale};
  const std::string format_name = kvq_format_name(format);

  std::cout << fmt::format(
      "{}: {} tokens x {} heads x {} ({}) for {} (format {})\n"
      "rule for {}: {}\n\n",
      f.input, sides[0].T, sides[0].H, sides[0].D, safetensors_dtype_name(in.at("key").dtype),
      f.config, format_name, format_name, rule.headline);

  nlohmann::json doc = {{"input", f.input},
                        {"config", f.config},
                        {"format", format_name},
                        {"rule", rule.text},
                        {"tokens", sides[0].T}};
  std::string yaml;
  for (int s = 0; s < 2; ++s) {
    const Rows& r = sides[s];
    const float amax = amax_of(r, -1);
    // The format's rule first, then the other common one for comparison, then the config's.
    std::vector<Candidate> scored = {
        {fmt::format("{}: amax / {:g}", format_name, rule.divisor),
         scale_for(amax, rule.divisor),
         {}},
        format == KVQ_FORMAT_NVFP4
            ? Candidate{"fp8: amax / 448", scale_for(amax, kE4m3Max), {}}
            : Candidate{"nvfp4: amax / 2688", scale_for(amax, kE2m1Max * kE4m3Max), {}},
        {"the config's", configured[s], {}},
    };
    for (Candidate& c : scored) c.error = round_trip(format, r, -1, c.scale);
    std::cout << fmt::format("{} (amax {:.6g})\n", names[s], amax);
    std::cout << fmt::format("  {:<24} {:>12} {:>15} {:>11}\n", "convention", "scale",
                             "rel. L2 error", "max error");
    for (const Candidate& c : scored) {
      std::cout << fmt::format("  {:<24} {:>12.6g} {:>15.4f} {:>11.4g}\n", c.rule, c.scale,
                               c.error.relative, c.error.max);
    }
    nlohmann::json side = {{"amax", amax},
                           {"scale", scored[0].scale},
                           {"relative_error", scored[0].error.relative},
                           {"max_error", scored[0].error.max},
                           {"conventions", nlohmann::json::array()},
                           {"per_head", nlohmann::json::array()}};
    for (const Candidate& c : scored) side["conventions"].push_back(to_json(c));
    std::cout << fmt::format("  per head ({} rule):\n  {:>6} {:>12} {:>12} {:>15}\n", format_name,
                             "head", "amax", "scale", "rel. L2 error");
    for (int64_t h = 0; h < r.H; ++h) {
      const float head_amax = amax_of(r, h);
      const float scale = scale_for(head_amax, rule.divisor);
      const ErrorFigures e = round_trip(format, r, h, scale);
      std::cout << fmt::format("  {:>6} {:>12.6g} {:>12.6g} {:>15.4f}\n", h, head_amax, scale,
                               e.relative);
      side["per_head"].push_back({{"head", h},
                                  {"amax", head_amax},
                                  {"scale", scale},
                                  {"relative_error", e.relative},
                                  {"max_error", e.max}});
    }
    std::cout << "\n";
    doc[s == 0 ? "key" : "value"] = side;
    yaml += fmt::format("  {}: {:.6g}\n", names[s], scored[0].scale);
  }
  std::cout << "for the config's cache section (one scale per side; per-head scales are a write "
               "argument, fp8 only):\n"
            << yaml;
  if (!f.json.empty()) {
    write_file_atomically(f.json, doc.dump(2) + "\n");
    std::cout << "wrote " << f.json << "\n";
  }
  return kExitOk;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Runner& run) {
  auto* sub = app.add_subcommand(
      "calibrate",
      "Print the k_scale / v_scale the config's format wants for given K/V rows, and the error "
      "each convention gives");
  auto f = std::make_shared<CalibrateFlags>();
  sub->add_option("CONFIG", f->config, "YAML config (format, num_kv_heads, head_size)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--input", f->input,
                  "safetensors with key, value [T, H, D] (BF16|F16|F32): rows typical of the "
                  "model's K and V (make_kv.py, or a dump from the engine)")
      ->check(kNonEmpty)
      ->type_name("FILE")
      ->required();
  sub->add_option("--json", f->json, "Also write the figures to this JSON file")
      ->check(kNonEmpty)
      ->type_name("FILE");
  f->common = add_common_flags(*sub);
  sub->callback([&run, f] { run = [f] { return run_calibrate(*f); }; });
}

}  // namespace kvq::app
