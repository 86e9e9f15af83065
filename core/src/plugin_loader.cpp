#include "plugin_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "kvq/core/file_kind.h"
#include "kvq/core/logging.h"
#include "plugin_file_checks.h"

namespace kvq {

namespace detail {
namespace {

namespace fs = std::filesystem;
using Library = boost::dll::shared_library;

// Every library core ever opened, by canonical path. Deliberately leaked and never cleared:
// kvq never unloads a plugin (a library that registered CUDA kernels crashes when unloaded, and
// objects it made may outlive any Registry, even into static destruction at exit).
struct OpenLibraries {
  std::mutex mutex;
  std::map<fs::path, std::shared_ptr<const Library>> by_file;
};

OpenLibraries& open_libraries() {
  static auto* libraries = new OpenLibraries;
  return *libraries;
}

bool starts_with_elf_magic(const fs::path& file) {
  std::array<char, 4> magic{};
  std::ifstream in(file, std::ios::binary);
  in.read(magic.data(), magic.size());
  return in.gcount() == 4 && std::memcmp(magic.data(),
                                         "\x7f"
                                         "ELF",
                                         4) == 0;
}

// Opens `canonical` once per process; on failure returns nullptr and says why (dlerror's text).
std::shared_ptr<const Library> open_library(const fs::path& canonical, std::string* why) {
  auto& open = open_libraries();
  std::lock_guard lock(open.mutex);
  if (auto it = open.by_file.find(canonical); it != open.by_file.end()) return it->second;

  // rtld_local: plugins do not see each other's symbols; rtld_now: every function a plugin
  // needs is resolved here, so that one this machine lacks is a load error kvq reports, not a
  // "symbol lookup error" that ends the process at the first call (a constructor's, even).
  // Optional entry points (the CUDA driver's) are looked up with dlsym by the code that uses them.
  boost::dll::fs::error_code ec;
  auto library = std::make_shared<Library>(
      canonical, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec || !library->is_loaded()) {
    // Boost.DLL keeps dlopen's error in dlerror() (its own fallback checks make no dl calls).
    const char* text = dlerror();
    const std::string detail = text ? text : ec.message();
    if (!starts_with_elf_magic(canonical)) {
      *why = "not a shared library (dlopen: " + detail + ")";
    } else {
      *why = "cannot be loaded as a shared library (dlopen: " + detail + ")";
    }
    return nullptr;
  }
  open.by_file.emplace(canonical, library);
  return library;
}

// True when the object loaded at `base` is the library `handle` names.
bool in_library(void* handle, const void* base) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return false;
  Dl_info info{};
  return dladdr(reinterpret_cast<const void*>(map->l_ld), &info) != 0 && info.dli_fbase == base;
}

// True when `address` lies in an executable segment of a loaded object: a variable exported under
// the entry's name lies in data, and calling it would crash the host.
bool in_executable_segment(const void* address) {
  struct Query {
    uintptr_t address;
    bool executable;
  } query{reinterpret_cast<uintptr_t>(address), false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && q->address >= begin && q->address - begin < ph.p_memsz) {
            q->executable = (ph.p_flags & PF_X) != 0;
            return 1;  // found its segment: stop
          }
        }
        return 0;
      },
      &query);
  return query.executable;
}

// Host callbacks handed to every plugin's init: one line a call, into kvq's logger.
void log_line(void*, int32_t level, const char* message) {
  if (message == nullptr) return;
  const std::string text = message_text(message, 4096);
  switch (level) {
    case KVQ_LOG_TRACE: KVQ_LOG_TRACE("{}", text); break;
    case KVQ_LOG_DEBUG: KVQ_LOG_DEBUG("{}", text); break;
    case KVQ_LOG_INFO: KVQ_LOG_INFO("{}", text); break;
    case KVQ_LOG_WARN: KVQ_LOG_WARN("{}", text); break;
    default: KVQ_LOG_ERROR("{}", text); break;
  }
}

int32_t log_enabled(void*, int32_t level) {
  const auto spd = level <= KVQ_LOG_TRACE   ? spdlog::level::trace
                   : level == KVQ_LOG_DEBUG ? spdlog::level::debug
                   : level == KVQ_LOG_INFO  ? spdlog::level::info
                   : level == KVQ_LOG_WARN  ? spdlog::level::warn
                                            : spdlog::level::err;
  return logger().should_log(spd) ? 1 : 0;
}

std::string error_text(const kvq_error& err) {
  return err.message != nullptr ? message_text(err.message, 1024) : std::string("(no message)");
}

}  // namespace

const kvq_host& host_callbacks() {
  static const kvq_host host{sizeof(kvq_host), KVQ_PLUGIN_ABI_VERSION, nullptr, &log_line,
                             &log_enabled};
  return host;
}

LoadResult load_plugin(const fs::path& file, const fs::path& canonical) {
  LoadResult result;
  auto fail = [&result](std::string why) {
    result.failure = std::move(why);
    return result;
  };

  // Only a regular file is opened: dlopen of a FIFO named like a plugin blocks until something
  // writes to it (for ever, in a plugin folder), and a device or socket is no library either.
  if (const std::string kind = non_regular_kind(canonical); !kind.empty()) {
    return fail("not a regular file (" + kind + "): expected a shared library");
  }
  // What dlopen must not see: a file another user can change, a truncated ELF file (its
  // segments would be mapped past the end of the file: SIGBUS), one built for another machine.
  if (std::string refused = plugin_file_refusal(canonical, insecure_plugins_allowed());
      !refused.empty()) {
    return fail(std::move(refused));
  }

  std::string why;
  auto library = open_library(canonical, &why);
  if (!library) return fail(why);

  // A plain C function: whatever compiled the plugin, its address is the entry point. It must
  // lie in this library's code (a variable of that name, or one found in another library, is
  // not called).
  constexpr const char* kEntry = KVQ_PLUGIN_ENTRY_NAME;
  void* symbol = dlsym(library->native(), kEntry);
  if (symbol == nullptr) {
    return fail(std::string("no ") + kEntry +
                " function: not a kvq plugin (export one with KVQ_PLUGIN_EXPORT_ENTRY; plugins "
                "of kvq 0.1 exported kvq_backend_entry, ABI 1: rebuild against this kvq)");
  }
  Dl_info where{};
  if (dladdr(symbol, &where) == 0 || where.dli_fbase == nullptr ||
      !in_library(library->native(), where.dli_fbase) || !in_executable_segment(symbol)) {
    return fail(std::string(kEntry) + " is not a function of this library");
  }
  auto entry = reinterpret_cast<kvq_plugin_entry_fn>(symbol);
  const kvq_plugin* p = entry();
  if (p == nullptr) return fail(std::string(kEntry) + " returned null");

  // The ABI version is the one field whose position every version agrees on: read it before
  // anything else, and touch nothing else when it differs.
  if (p->abi_version != KVQ_PLUGIN_ABI_VERSION) {
    return fail(fmt::format("plugin ABI {}, host ABI {} (rebuild the plugin against this kvq)",
                            p->abi_version, KVQ_PLUGIN_ABI_VERSION));
  }
  // Fields appended within ABI 2 (create_attention) are optional: an ABI 2.0 descriptor ends
  // before them.
  if (p->struct_size < KVQ_PLUGIN_MIN_STRUCT_SIZE) {
    return fail(
        fmt::format("kvq_plugin is {} bytes, ABI {} has {}: a damaged or hand-made "
                    "descriptor",
                    p->struct_size, KVQ_PLUGIN_ABI_VERSION, KVQ_PLUGIN_MIN_STRUCT_SIZE));
  }
  if (!p->name || p->name[0] == '\0') return fail("descriptor has no name");
  const std::string name = message_text(p->name, 64);
  if (!p->init || !p->probe || !p->create_writer || !p->create_reader) {
    return fail(fmt::format("plugin '{}': descriptor lacks {}", name,
                            !p->init            ? "init"
                            : !p->probe         ? "probe"
                            : !p->create_writer ? "create_writer"
                                                : "create_reader"));
  }

  kvq_error err{};
  if (p->init(&host_callbacks(), &err) != KVQ_OK) {
    return fail(fmt::format("plugin '{}': init failed: {}", name, error_text(err)));
  }
  kvq_probe probe{};
  if (p->probe(&probe, &err) != KVQ_OK) {
    return fail(fmt::format("plugin '{}': probe failed: {}: {}", name,
                            error_code_name(static_cast<ErrorCode>(err.code)), error_text(err)));
  }

  auto plugin = std::make_shared<LoadedPlugin>();
  plugin->library = std::move(library);
  plugin->plugin = p;
  plugin->info.name = name;
  plugin->info.version = p->version ? message_text(p->version, 64) : "";
  plugin->info.file = file;
  plugin->info.formats = p->formats ? message_text(p->formats, 256) : "";
  plugin->info.layouts = p->layouts ? message_text(p->layouts, 256) : "";
  plugin->info.input_dtypes = p->input_dtypes ? message_text(p->input_dtypes, 256) : "";
  plugin->info.available = probe.available != 0;
  plugin->info.score = probe.score;
  plugin->info.reason = probe.reason ? message_text(probe.reason, 512) : "";
  KVQ_LOG_DEBUG("plugin {} {} loaded from {}: {}", name, plugin->info.version, file.string(),
                plugin->info.available ? "available" : "unavailable: " + plugin->info.reason);
  result.plugin = std::move(plugin);
  return result;
}

}  // namespace detail
}  // namespace kvq
