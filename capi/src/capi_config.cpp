// Configs: loaded and checked as the kvq commands do (load_config, then the layout's geometry and
// format rules reported at FILE:LINE:COL), and described as JSON for the Python side.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "capi_objects.h"
#include "kvq/layouts/layout_factory.h"

namespace kvq::capi {
namespace {

kvq_capi_config* checked(Config cfg) {
  auto out = std::make_unique<kvq_capi_config>();
  try {
    out->layout = make_layout(cfg.cache);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    cfg.fail_at(e.key().empty() ? "cache" : e.key(), e.what());
  }
  out->config = std::move(cfg);
  return out.release();
}

}  // namespace
}  // namespace kvq::capi

using kvq::capi::guard;
using kvq::capi::require;

extern "C" {

kvq_capi_status kvq_capi_config_load(const char* path, kvq_capi_config** out) {
  return guard([&] {
    require(path, "kvq_capi_config_load", "path");
    require(out, "kvq_capi_config_load", "out");
    *out = nullptr;
    std::error_code ec;  // the non-throwing form: load_config names the other failures
    if (std::filesystem::status(path, ec).type() == std::filesystem::file_type::not_found) {
      throw kvq::Error(kvq::ErrorCode::not_found,
                       kvq::message_text(path, 4096) + ": no such config file");
    }
    *out = kvq::capi::checked(kvq::load_config(path));
  });
}

kvq_capi_status kvq_capi_config_parse(const char* yaml, const char* source, kvq_capi_config** out) {
  return guard([&] {
    require(yaml, "kvq_capi_config_parse", "yaml");
    require(out, "kvq_capi_config_parse", "out");
    *out = nullptr;
    *out = kvq::capi::checked(kvq::parse_config(yaml, source ? source : "<string>"));
  });
}

void kvq_capi_config_free(kvq_capi_config* cfg) {
  delete cfg;
}

kvq_capi_status kvq_capi_config_json(const kvq_capi_config* cfg, char** out) {
  return guard([&] {
    require(cfg, "kvq_capi_config_json", "cfg");
    require(out, "kvq_capi_config_json", "out");
    const kvq::Config& c = cfg->config;
    const kvq::PageLayout& layout = *cfg->layout;
    nlohmann::json j;
    j["source"] = c.source;
    j["backend"] = c.backend;
    j["device"] = c.device;
    j["threads"] = c.threads;
    j["plugin_paths"] = c.plugin_paths;
    j["cache"] = {{"format", layout.format()},        {"num_blocks", c.cache.num_blocks},
                  {"block_size", c.cache.block_size}, {"num_kv_heads", c.cache.num_kv_heads},
                  {"head_size", c.cache.head_size},   {"k_scale", c.cache.k_scale},
                  {"v_scale", c.cache.v_scale}};
    const auto shape = layout.cache_shape();
    j["cache_shape"] = {shape[0], shape[1]};
    j["page_bytes"] = layout.page_bytes();
    j["cache_bytes"] = layout.cache_bytes();
    j["side_bytes"] = layout.descriptor().side_bytes;
    j["layout"] = layout.metadata();
    nlohmann::json regions = nlohmann::json::array();
    for (const kvq::Region& r : layout.regions()) {
      regions.push_back({{"name", r.name},
                         {"offset", r.offset},
                         {"bytes", r.bytes},
                         {"arrangement", r.arrangement}});
    }
    j["regions"] = std::move(regions);
    // error_handler replace: a path or a YAML value need not be valid UTF-8.
    *out = kvq::capi::copy_string(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
}

}  // extern "C"
