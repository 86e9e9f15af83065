#include "kvq/core/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstdlib>
#include <string_view>

#include "kvq/core/contract.h"
#include "kvq/core/logging.h"
#include "kvq/core/plugin_glue.h"
#include "plugin_loader.h"
#include "plugin_objects.h"

namespace kvq {
namespace {

namespace fs = std::filesystem;

// libkvq_<name>.so: what a folder scan picks up (other files in plugin folders are ignored).
bool is_plugin_file_name(const fs::path& file) {
  const std::string name = file.filename().string();
  return name.size() > std::string_view("libkvq_.so").size() && name.starts_with("libkvq_") &&
         name.ends_with(".so");
}

std::string join_files(const std::vector<fs::path>& files) {
  std::string out;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) out += i + 1 == files.size() ? " and " : ", ";
    out += files[i].string();
  }
  return out;
}

}  // namespace

// ---- Backend ------------------------------------------------------------------------------------

Backend::Backend(std::shared_ptr<const LoadedPlugin> plugin) : plugin_(std::move(plugin)) {}

const PluginInfo& Backend::info() const {
  return plugin_->info;
}

namespace {

[[noreturn]] void refused(const LoadedPlugin& plugin, const char* what, const kvq_error& err) {
  const Status s = detail::to_status(err);
  throw Error(s.code(),
              fmt::format("backend '{}' ({}): cannot create a {}: {}", plugin.info.name,
                          plugin.info.file.string(), what, s.message()),
              s.key());
}

[[noreturn]] void returned_nothing(const LoadedPlugin& plugin, const char* what) {
  throw Error(ErrorCode::internal,
              fmt::format("backend '{}' ({}): create_{} reported success but returned no {}",
                          plugin.info.name, plugin.info.file.string(), what, what));
}

// The C options for `options`: the page descriptor is the host's, validated once here.
struct CrossingOptions {
  PageLayout layout;
  kvq_backend_options c{};

  explicit CrossingOptions(const BackendOptions& o) : layout(PageLayout::from_spec(o.cache)) {
    c.struct_size = sizeof(kvq_backend_options);
    c.page = &layout.descriptor();
    c.has_device = o.device.has_value() ? 1 : 0;
    c.device = o.device ? to_abi(*o.device) : kvq_device{kDLCPU, 0};
    c.threads = o.threads;
  }
};

}  // namespace

std::shared_ptr<KVCacheWriter> Backend::make_writer(const BackendOptions& options) const {
  const CrossingOptions o(options);
  kvq_writer* raw = nullptr;
  kvq_error err{};
  if (plugin_->plugin->create_writer(&o.c, &raw, &err) != KVQ_OK) {
    refused(*plugin_, "writer", err);
  }
  if (raw == nullptr || raw->ops == nullptr || raw->ops->requirements(raw) == nullptr) {
    returned_nothing(*plugin_, "writer");
  }
  return detail::wrap_writer(plugin_, raw, o.layout);
}

std::shared_ptr<KVCacheReader> Backend::make_reader(const BackendOptions& options) const {
  const CrossingOptions o(options);
  kvq_reader* raw = nullptr;
  kvq_error err{};
  if (plugin_->plugin->create_reader(&o.c, &raw, &err) != KVQ_OK) {
    refused(*plugin_, "reader", err);
  }
  if (raw == nullptr || raw->ops == nullptr || raw->ops->requirements(raw) == nullptr) {
    returned_nothing(*plugin_, "reader");
  }
  return detail::wrap_reader(plugin_, raw, o.layout);
}

bool Backend::has_attention() const {
  return KVQ_PLUGIN_HAS_ATTENTION(plugin_->plugin);
}

std::shared_ptr<KVCacheAttention> Backend::make_attention(const BackendOptions& options) const {
  if (!has_attention()) {
    throw Error(ErrorCode::unavailable,
                fmt::format("backend '{}' ({}) has no decode attention", plugin_->info.name,
                            plugin_->info.file.string()));
  }
  const CrossingOptions o(options);
  kvq_attention* raw = nullptr;
  kvq_error err{};
  if (plugin_->plugin->create_attention(&o.c, &raw, &err) != KVQ_OK) {
    refused(*plugin_, "attention", err);
  }
  if (raw == nullptr || raw->ops == nullptr || raw->ops->requirements(raw) == nullptr) {
    returned_nothing(*plugin_, "attention");
  }
  return detail::wrap_attention(plugin_, raw, o.layout);
}

std::shared_ptr<DeviceRuntime> Backend::make_runtime(const BackendOptions& options) const {
  if (plugin_->plugin->create_runtime == nullptr) {
    // Host memory: core's process-wide runtime, not owned.
    return std::shared_ptr<DeviceRuntime>(&host_runtime(), [](DeviceRuntime*) {});
  }
  const CrossingOptions o(options);
  kvq_runtime* raw = nullptr;
  kvq_error err{};
  if (plugin_->plugin->create_runtime(&o.c, &raw, &err) != KVQ_OK) {
    refused(*plugin_, "runtime", err);
  }
  if (raw == nullptr || raw->ops == nullptr) returned_nothing(*plugin_, "runtime");
  return detail::wrap_runtime(plugin_, raw);
}

// ---- where plugins are searched -----------------------------------------------------------------

namespace {

// From this library's own file, not the executable's: an engine that links kvq (a Python process,
// a server binary) lives elsewhere, while libkvq_core and the plugins are installed together. For
// kvq's own programs it is the same folder (<prefix>/bin/../lib/kvq/plugins). Links are resolved
// (a libkvq_core.so.0 linked into /usr/local/lib finds the plugins beside the real file), and it
// is computed once, as the library loads: a relative LD_LIBRARY_PATH must not be taken relative
// to a folder the program changed to later.
fs::path plugin_dir_beside_this_library() {
  boost::dll::fs::error_code ec;
  const fs::path self = boost::dll::this_line_location(ec);
  if (ec || self.empty()) return {};
  std::error_code ec2;
  const fs::path absolute = fs::absolute(self, ec2);
  if (ec2) return {};
  const fs::path lib = fs::weakly_canonical(absolute, ec2);
  if (ec2) return {};
  return lib.parent_path() / "kvq" / "plugins";
}

const fs::path kInstalledPluginDir = plugin_dir_beside_this_library();

}  // namespace

fs::path Registry::installed_plugin_dir() {
  return kInstalledPluginDir;
}

std::vector<fs::path> Registry::search_path(const std::vector<std::string>& plugin_paths,
                                            const fs::path& base_dir) {
  std::vector<fs::path> out;
  for (const auto& p : plugin_paths) {
    fs::path path(p);
    if (path.is_relative() && !base_dir.empty()) path = base_dir / path;
    out.push_back(path.lexically_normal());
  }
  if (const char* env = std::getenv("KVQ_PLUGIN_PATH")) {
    std::string_view rest(env);
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view item = rest.substr(0, colon);
      if (!item.empty()) out.push_back(fs::path(item).lexically_normal());
      rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    }
  }
  // The installed folder is searched only when it exists: a program copied elsewhere on its own
  // still works with KVQ_PLUGIN_PATH, without a "not found" line for a folder it never had.
  std::error_code ec;
  if (fs::path installed = installed_plugin_dir();
      !installed.empty() && fs::is_directory(installed, ec)) {
    out.push_back(installed);
  }
  return out;
}

// ---- scan ---------------------------------------------------------------------------------------

void Registry::scan(const std::vector<fs::path>& folders_or_files) {
  auto load_file = [this](const fs::path& file) {
    std::error_code ec;
    const fs::path canonical = fs::canonical(file, ec);
    if (ec) {
      failures_.push_back({file, "file not found"});
      return;
    }
    if (std::find(scanned_.begin(), scanned_.end(), canonical) != scanned_.end()) return;
    scanned_.push_back(canonical);

    detail::LoadResult loaded = detail::load_plugin(file, canonical);
    if (!loaded.plugin) {
      KVQ_LOG_DEBUG("plugin file {} not used: {}", file.string(), loaded.failure);
      failures_.push_back({file, loaded.failure});
      return;
    }
    const std::string& name = loaded.plugin->info.name;

    // A name is a promise that one file answers to it: a second file with the same name makes
    // the choice ambiguous, so neither is used.
    auto conflict = std::find_if(conflicts_.begin(), conflicts_.end(),
                                 [&](const auto& c) { return c.first == name; });
    if (conflict != conflicts_.end()) {
      conflict->second.push_back(file);
      failures_.push_back({file, fmt::format("plugin name '{}' is also used by {}; neither is "
                                             "used (plugin names must be unique)",
                                             name, conflict->second.front().string())});
      return;
    }
    auto same = std::find_if(loaded_.begin(), loaded_.end(),
                             [&](const auto& plugin) { return plugin->info.name == name; });
    if (same != loaded_.end()) {
      const fs::path first = (*same)->info.file;
      conflicts_.push_back({name, {first, file}});
      loaded_.erase(same);
      failures_.push_back({file, fmt::format("plugin name '{}' is also used by {}; neither is "
                                             "used (plugin names must be unique)",
                                             name, first.string())});
      return;
    }
    loaded_.push_back(std::move(loaded.plugin));
  };

  for (const auto& given : folders_or_files) {
    // Absolute, so that messages and `kvq backends` name a file one can find from anywhere.
    std::error_code ec;
    const fs::path item = fs::absolute(given, ec).lexically_normal();
    searched_.push_back(item);
    const auto status = fs::status(item, ec);
    if (!fs::exists(status)) {
      failures_.push_back({item, "file not found"});
      continue;
    }
    if (!fs::is_directory(status)) {
      load_file(item);
      continue;
    }
    // Sorted, so that what is loaded first (and named first in messages) does not depend on the
    // order the file system lists a folder in.
    // A folder named like a plugin is skipped; any other file that is not a regular one (a FIFO,
    // a device) is reported by load_plugin without being opened.
    std::vector<fs::path> files;
    for (fs::directory_iterator it(item, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (is_plugin_file_name(it->path()) && !it->is_directory(type_ec)) {
        files.push_back(it->path());
      }
    }
    if (ec) {
      failures_.push_back({item, "cannot list the folder: " + ec.message()});
      continue;
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) load_file(file);
  }
  infos_.clear();
  for (const auto& plugin : loaded_) infos_.push_back(plugin->info);
}

// ---- select -------------------------------------------------------------------------------------

namespace {

// "found: reference_cpu, cuda (unavailable: no CUDA device); not loaded: F (reason)"
std::string describe_found(const std::vector<PluginInfo>& infos,
                           const std::vector<PluginFailure>& failures,
                           const std::vector<fs::path>& searched) {
  std::string out;
  if (infos.empty()) {
    out = "no plugins found";
  } else {
    out = "found: ";
    for (size_t i = 0; i < infos.size(); ++i) {
      if (i > 0) out += ", ";
      out += infos[i].name;
      if (!infos[i].available) out += " (unavailable: " + infos[i].reason + ")";
    }
  }
  if (!failures.empty()) {
    out += "; not loaded: ";
    for (size_t i = 0; i < failures.size(); ++i) {
      if (i > 0) out += "; ";
      out += failures[i].file.string() + " (" + failures[i].reason + ")";
    }
  }
  out += "; searched: " + (searched.empty() ? std::string("nothing") : join_files(searched));
  return out;
}

}  // namespace

Backend Registry::select(const std::string& name) const {
  for (const auto& [conflicted, files] : conflicts_) {
    if (conflicted == name) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("backend '{}' is ambiguous: it is provided by both {}; remove all "
                              "but one from the plugin search path",
                              name, join_files(files)));
    }
  }

  if (name != "auto") {
    for (const auto& plugin : loaded_) {
      const PluginInfo& info = plugin->info;
      if (info.name != name) continue;
      if (!info.available) {
        throw Error(ErrorCode::unavailable, fmt::format("backend '{}' ({}) is unavailable: {}",
                                                        name, info.file.string(), info.reason));
      }
      KVQ_LOG_DEBUG("backend {} {} from {}: {}", info.name, info.version, info.file.string(),
                    info.reason);
      return Backend(plugin);
    }
    throw Error(ErrorCode::not_found, fmt::format("no backend named '{}' ({})", name,
                                                  describe_found(infos_, failures_, searched_)));
  }

  // auto: the highest probe score among available plugins; the first found wins a tie.
  std::shared_ptr<const LoadedPlugin> best;
  for (const auto& plugin : loaded_) {
    if (plugin->info.available && (!best || plugin->info.score > best->info.score)) best = plugin;
  }
  if (!best) {
    throw Error(ErrorCode::unavailable, fmt::format("backend auto: no available backend ({})",
                                                    describe_found(infos_, failures_, searched_)));
  }
  const PluginInfo& chosen = best->info;
  // Say why a backend one might expect was passed over ("cuda unavailable: no CUDA
  // device"), so a fallback to the CPU is never silent.
  std::string passed_over;
  for (const auto& plugin : loaded_) {
    const PluginInfo& info = plugin->info;
    if (!info.available) passed_over += fmt::format("{} unavailable: {}; ", info.name, info.reason);
  }
  for (const auto& [conflicted, files] : conflicts_) {
    passed_over += fmt::format("{} ignored: provided by both {}; ", conflicted, join_files(files));
  }
  KVQ_LOG_INFO("backend auto: {}using {} {} (score {}{}{}) from {}", passed_over, chosen.name,
               chosen.version, chosen.score, chosen.reason.empty() ? "" : ", ", chosen.reason,
               chosen.file.string());
  return Backend(best);
}

}  // namespace kvq
