// Backends, writers and readers: kvq::open_backend and the host's KVCacheWriter/KVCacheReader,
// whose calls check the whole contract (kvq/core/contract.h) before a plugin sees them.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "capi_objects.h"
#include "capi_packed.h"
#include "kvq/core/registry.h"

using kvq::capi::guard;
using kvq::capi::require;

namespace kvq::capi {
namespace {

nlohmann::json info_json(const PluginInfo& p) {
  return {{"name", p.name},           {"version", p.version}, {"file", p.file.string()},
          {"formats", p.formats},     {"layouts", p.layouts}, {"input_dtypes", p.input_dtypes},
          {"available", p.available}, {"score", p.score},     {"reason", p.reason}};
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A tensor of a call, as the contract sees it; a DLTensor kvq cannot describe is refused naming
// the argument ("key: DLPack dtype (code 2, 64 bits) is not supported: ...").
TensorView view_of(const DLTensor* t, const char* name) {
  if (t == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: expected a tensor, found NULL", name));
  }
  try {
    return from_dlpack(*t);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", name, e.what()));
  }
}

kvq_capi_status write(kvq_capi_writer* w, const DLTensor* key, const DLTensor* value,
                      const DLTensor* cache, const DLTensor* slots, float k_scale, float v_scale,
                      const float* k_scale_ptr, const float* v_scale_ptr, void* stream) {
  WriteArgs args;
  const kvq_capi_status converted = guard([&] {
    require(w, "kvq_capi_writer_write", "writer");
    args.key = view_of(key, "key");
    args.value = view_of(value, "value");
    args.cache = view_of(cache, "cache");
    args.slot_mapping = view_of(slots, "slot_mapping");
  });
  if (converted != 0) return converted;
  args.k_scale = k_scale;
  args.v_scale = v_scale;
  args.k_scale_ptr = k_scale_ptr;
  args.v_scale_ptr = v_scale_ptr;
  args.stream = stream;
  const Status s = w->writer->write(args);  // noexcept; a failure is a Status, not a throw
  return s.is_ok() ? 0 : fail(s);
}

kvq_capi_status read(kvq_capi_reader* r, const DLTensor* cache, const DLTensor* slots,
                     const DLTensor* key, const DLTensor* value, float k_scale, float v_scale,
                     void* stream) {
  ReadArgs args;
  const kvq_capi_status converted = guard([&] {
    require(r, "kvq_capi_reader_read", "reader");
    args.cache = view_of(cache, "cache");
    args.slot_mapping = view_of(slots, "slot_mapping");
    args.key = view_of(key, "key");
    args.value = view_of(value, "value");
  });
  if (converted != 0) return converted;
  args.k_scale = k_scale;
  args.v_scale = v_scale;
  args.stream = stream;
  const Status s = r->reader->read(args);
  return s.is_ok() ? 0 : fail(s);
}

}  // namespace
}  // namespace kvq::capi

extern "C" {

kvq_capi_status kvq_capi_backends_json(const kvq_capi_config* cfg, char** out) {
  return guard([&] {
    require(out, "kvq_capi_backends_json", "out");
    kvq::Registry registry;
    if (cfg != nullptr) {
      kvq::check_plugin_paths(cfg->config);
      registry.scan(kvq::Registry::search_path(cfg->config.plugin_paths, cfg->config.base_dir()));
    } else {
      registry.scan(kvq::Registry::search_path({}));
    }
    nlohmann::json plugins = nlohmann::json::array();
    for (const kvq::PluginInfo& p : registry.plugins()) plugins.push_back(kvq::capi::info_json(p));
    nlohmann::json failures = nlohmann::json::array();
    for (const kvq::PluginFailure& f : registry.failures()) {
      failures.push_back({{"file", f.file.string()}, {"reason", f.reason}});
    }
    *out = kvq::capi::copy_string(
        kvq::capi::dump({{"plugins", std::move(plugins)}, {"failures", std::move(failures)}}));
  });
}

kvq_capi_status kvq_capi_backend_open(const kvq_capi_config* cfg, const char* name,
                                      const char* device, kvq_capi_backend** out) {
  return guard([&] {
    require(cfg, "kvq_capi_backend_open", "cfg");
    require(out, "kvq_capi_backend_open", "out");
    *out = nullptr;
    std::optional<kvq::Device> override_device;
    const bool has_device = device != nullptr && device[0] != '\0';
    if (has_device && std::string_view(device) != "auto") {
      override_device = kvq::parse_device(device);
      if (!override_device) {
        throw kvq::Error(
            kvq::ErrorCode::invalid_argument,
            fmt::format("device '{}': expected auto, cpu or cuda:N", kvq::message_text(device)));
      }
    }
    std::optional<std::string> name_override;
    if (name != nullptr && name[0] != '\0') name_override = name;
    auto b = std::make_unique<kvq_capi_backend>(
        kvq_capi_backend{cfg->config, kvq::open_backend(cfg->config, name_override)});
    if (has_device) b->opened.options.device = override_device;
    *out = b.release();
  });
}

void kvq_capi_backend_free(kvq_capi_backend* backend) {
  delete backend;
}

kvq_capi_status kvq_capi_backend_json(const kvq_capi_backend* backend, char** out) {
  return guard([&] {
    require(backend, "kvq_capi_backend_json", "backend");
    require(out, "kvq_capi_backend_json", "out");
    *out = kvq::capi::copy_string(
        kvq::capi::dump(kvq::capi::info_json(backend->opened.backend.info())));
  });
}

kvq_capi_status kvq_capi_writer_create(const kvq_capi_backend* backend, kvq_capi_writer** out) {
  return guard([&] {
    require(backend, "kvq_capi_writer_create", "backend");
    require(out, "kvq_capi_writer_create", "out");
    *out = nullptr;
    const kvq::OpenedBackend& o = backend->opened;
    auto w = std::make_unique<kvq_capi_writer>();
    w->writer =
        kvq::at_config_keys(backend->config, [&] { return o.backend.make_writer(o.options); });
    w->device = kvq::to_string(w->writer->device());
    *out = w.release();
  });
}

void kvq_capi_writer_free(kvq_capi_writer* writer) {
  delete writer;
}

const char* kvq_capi_writer_device(const kvq_capi_writer* writer) {
  return writer ? writer->device.c_str() : "";
}

kvq_capi_status kvq_capi_writer_write(kvq_capi_writer* writer, const DLTensor* key,
                                      const DLTensor* value, const DLTensor* cache,
                                      const DLTensor* slot_mapping, float k_scale, float v_scale,
                                      const float* k_scale_ptr, const float* v_scale_ptr,
                                      void* stream) {
  return kvq::capi::write(writer, key, value, cache, slot_mapping, k_scale, v_scale, k_scale_ptr,
                          v_scale_ptr, stream);
}

kvq_capi_status kvq_capi_writer_write_packed(kvq_capi_writer* writer, const int64_t* words,
                                             int64_t count, float k_scale, float v_scale,
                                             const float* k_scale_ptr, const float* v_scale_ptr,
                                             void* stream) {
  kvq::capi::PackedTensors t;
  const kvq_capi_status s = guard([&] { t.unpack(words, count, "kvq_capi_writer_write_packed"); });
  if (s != 0) return s;
  return kvq::capi::write(writer, &t[0], &t[1], &t[2], &t[3], k_scale, v_scale, k_scale_ptr,
                          v_scale_ptr, stream);
}

kvq_capi_status kvq_capi_writer_take_out_of_range_slots(kvq_capi_writer* writer, int64_t* count) {
  return guard([&] {
    require(writer, "kvq_capi_writer_take_out_of_range_slots", "writer");
    require(count, "kvq_capi_writer_take_out_of_range_slots", "count");
    kvq::throw_if_error(writer->writer->take_out_of_range_slots(count));
  });
}

kvq_capi_status kvq_capi_reader_create(const kvq_capi_backend* backend, kvq_capi_reader** out) {
  return guard([&] {
    require(backend, "kvq_capi_reader_create", "backend");
    require(out, "kvq_capi_reader_create", "out");
    *out = nullptr;
    const kvq::OpenedBackend& o = backend->opened;
    auto r = std::make_unique<kvq_capi_reader>();
    r->reader =
        kvq::at_config_keys(backend->config, [&] { return o.backend.make_reader(o.options); });
    r->device = kvq::to_string(r->reader->device());
    *out = r.release();
  });
}

void kvq_capi_reader_free(kvq_capi_reader* reader) {
  delete reader;
}

const char* kvq_capi_reader_device(const kvq_capi_reader* reader) {
  return reader ? reader->device.c_str() : "";
}

kvq_capi_status kvq_capi_reader_read(kvq_capi_reader* reader, const DLTensor* cache,
                                     const DLTensor* slot_mapping, const DLTensor* key,
                                     const DLTensor* value, float k_scale, float v_scale,
                                     void* stream) {
  return kvq::capi::read(reader, cache, slot_mapping, key, value, k_scale, v_scale, stream);
}

kvq_capi_status kvq_capi_reader_read_packed(kvq_capi_reader* reader, const int64_t* words,
                                            int64_t count, float k_scale, float v_scale,
                                            void* stream) {
  kvq::capi::PackedTensors t;
  const kvq_capi_status s = guard([&] { t.unpack(words, count, "kvq_capi_reader_read_packed"); });
  if (s != 0) return s;
  return kvq::capi::read(reader, &t[0], &t[1], &t[2], &t[3], k_scale, v_scale, stream);
}

}  // extern "C"
