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

#include "kvq/core/file_io.h"
#include "kvq/core/logging.h"
#include "plugin_file_checks.h"

namespace kvq {

BuildFingerprint host_build_fingerprint() noexcept {
  return KVQ_BUILD_FINGERPRINT;
}

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

std::string or_null(const char* s) {
  return s ? s : "(null)";
}

bool same(const char* a, const char* b) {
  return a && b && std::strcmp(a, b) == 0;
}

std::string describe(const BuildFingerprint& f) {
  return fmt::format("{} / {} / kvq {}", or_null(f.compiler), or_null(f.cxx_abi),
                     or_null(f.kvq_version));
}

// True when `address` lies in the same loaded object as `anchor`: the value of a Boost.DLL alias
// must point into the library that exports it (a plain function named kvq_backend_entry would
// be read as a pointer and give garbage).
bool same_object(const void* anchor, const void* address) {
  Dl_info a{}, b{};
  return dladdr(anchor, &a) != 0 && dladdr(address, &b) != 0 && a.dli_fbase == b.dli_fbase;
}

// True when `address` lies in an executable segment of a loaded object: an alias of a variable
// (KVQ_DEFINE_BACKEND(descriptor) instead of a function) points into data, and calling it would
// crash the host; and a plain function exported as kvq_backend_entry lies in code, where an
// alias (a variable holding a pointer) never does.
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

// Whether the exported symbol at `symbol` can be the variable BOOST_DLL_ALIAS defines: a
// pointer-sized, pointer-aligned data object outside any executable segment. Decided from the
// symbol table and the program headers alone, never by reading the bytes at `symbol`: a plain
// function exported under the alias's name would otherwise have its machine code read as a
// pointer (a misaligned read of code, undefined behaviour).
bool looks_like_alias_variable(const void* symbol, const char* name) {
  const auto at = reinterpret_cast<uintptr_t>(symbol);
  if (at % alignof(const void*) != 0 || in_executable_segment(symbol)) return false;
#if defined(RTLD_DL_SYMENT)  // glibc's dladdr1; elsewhere the checks above are all there is
  Dl_info info{};
  void* found = nullptr;
  if (dladdr1(symbol, &info, &found, RTLD_DL_SYMENT) == 0) return false;
  const auto* entry = static_cast<const ElfW(Sym)*>(found);
  // dladdr1 names the dynamic symbol nearest `symbol`; when that is another name for the same
  // address, the checks above are all there is to go on.
  if (!entry || !info.dli_sname || std::strcmp(info.dli_sname, name) != 0) return true;
  // (ELF32_ST_TYPE is the same macro.)
  return ELF64_ST_TYPE(entry->st_info) == STT_OBJECT && entry->st_size == sizeof(const void*);
#else
  (void)name;
  return true;
#endif
}

}  // namespace

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

  constexpr const char* kEntry = "kvq_backend_entry";
  if (!library->has(kEntry)) {
    return fail(std::string("no ") + kEntry +
                " symbol: not a kvq plugin (export one with KVQ_DEFINE_BACKEND)");
  }
  // BOOST_DLL_ALIAS exports a variable holding the function's address. The symbol itself is
  // checked to be such a variable before its bytes are read as a pointer.
  const auto not_an_alias = [&] {
    return fail(std::string(kEntry) +
                " is not a Boost.DLL alias into this library (export it with "
                "KVQ_DEFINE_BACKEND)");
  };
  const void* alias_variable = dlsym(library->native(), kEntry);
  if (!alias_variable || !looks_like_alias_variable(alias_variable, kEntry)) return not_an_alias();
  const void* target = nullptr;
  std::memcpy(&target, alias_variable, sizeof target);
  if (!target || !same_object(alias_variable, target)) return not_an_alias();
  auto* entry = reinterpret_cast<PluginEntryFn*>(const_cast<void*>(target));
  if (!in_executable_segment(target)) {
    return fail(std::string(kEntry) +
                " points at data, not at a function (KVQ_DEFINE_BACKEND takes the function that "
                "returns the descriptor)");
  }

  const PluginDescriptor* d = nullptr;
  try {
    d = entry();
  } catch (const std::exception& e) {
    return fail(std::string(kEntry) + " threw: " + e.what());
  } catch (...) {
    return fail(std::string(kEntry) + " threw an unknown exception");
  }
  if (!d) return fail(std::string(kEntry) + " returned null");

  // The ABI version is the one field whose position every version agrees on: read it before
  // anything else, and touch nothing else when it differs.
  if (d->abi_version != kPluginAbiVersion) {
    return fail(fmt::format("plugin ABI {}, host ABI {} (rebuild the plugin against this kvq)",
                            d->abi_version, kPluginAbiVersion));
  }

  // std::string, std::optional and vtables cross the boundary from here on: host and plugin must
  // agree on compiler family, C++ library ABI and kvq version.
  const BuildFingerprint host = host_build_fingerprint();
  if (!same(d->build.compiler, host.compiler) || !same(d->build.cxx_abi, host.cxx_abi) ||
      !same(d->build.kvq_version, host.kvq_version)) {
    return fail(fmt::format("build fingerprint mismatch: plugin built with {}, host with {}",
                            describe(d->build), describe(host)));
  }

  if (!d->name || d->name[0] == '\0') return fail("descriptor has no name");
  const std::string name = d->name;
  if (!d->probe || !d->create_writer || !d->create_reader) {
    return fail(fmt::format("plugin '{}': descriptor lacks {}", name,
                            !d->probe           ? "probe"
                            : !d->create_writer ? "create_writer"
                                                : "create_reader"));
  }

  ProbeResult probe;
  const Status probed = d->probe(&probe);
  if (!probed) {
    return fail(fmt::format("plugin '{}': probe failed: {}: {}", name,
                            error_code_name(probed.code()), probed.message()));
  }

  auto plugin = std::make_shared<LoadedPlugin>();
  plugin->library = std::move(library);
  plugin->descriptor = d;
  plugin->info.name = name;
  plugin->info.version = d->version ? d->version : "";
  plugin->info.file = file;
  plugin->info.formats = d->formats ? d->formats : "";
  plugin->info.layouts = d->layouts ? d->layouts : "";
  plugin->info.available = probe.available;
  plugin->info.score = probe.score;
  plugin->info.reason = probe.reason;
  KVQ_LOG_DEBUG("plugin {} {} loaded from {}: {}", name, plugin->info.version, file.string(),
                probe.available ? "available" : "unavailable: " + probe.reason);
  result.plugin = std::move(plugin);
  return result;
}

}  // namespace detail
}  // namespace kvq
