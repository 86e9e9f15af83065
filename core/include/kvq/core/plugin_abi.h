#pragma once
// The plugin ABI. A backend plugin is a shared library exporting exactly one Boost.DLL alias,
// `kvq_backend_entry`, a function returning a pointer to a static PluginDescriptor. The loader
// reads `abi_version` first and touches nothing else when it differs; then it compares the build
// fingerprint (C++ types cross this boundary, so host and plugin must share compiler family and
// C++ ABI); then name, version, probe and factories.
//
// Rules for plugin authors (docs/plugins.md): every function here is noexcept and reports errors
// as Status; log through kvq::logger(); keep no global state that matters after unload (kvq never
// unloads a plugin, but be ready for it); objects you return are destroyed by your own code
// (virtual destructors), and the host keeps your library loaded while they live.
#include <spdlog/version.h>  // SPDLOG_VER_*, for the fingerprint (macros only: fine under nvcc)

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvq/core/cache_spec.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"
#include "kvq/core/version.h"

namespace kvq {

// Bump on any change to the structs below or to the types that cross with them: the interfaces in
// kv_cache.h, page_layout.h and device_runtime.h, and TensorView / Device (tensor_view.h),
// CacheSpec (cache_spec.h), Status (status.h) and DType (dtype.h).
inline constexpr uint32_t kPluginAbiVersion = 1;

// What the plugin was built with; compared field by field with the host's before any C++ type
// crosses. Plain C strings so that comparing them is safe whatever the plugin was built with.
struct BuildFingerprint {
  const char* compiler;     // e.g. "gcc 12"
  const char* cxx_abi;      // e.g. "libstdc++ cxx11-abi=1, spdlog 1.10.0": the C++
                            // ABI and the libraries whose code a plugin compiles against the
                            // host's objects (it logs through the host's spdlog logger)
  const char* kvq_version;  // "0.1.0"
};

struct ProbeResult {
  bool available = false;
  int32_t score = 0;  // for `backend: auto`: the highest available score wins (reference_cpu: 10)
  std::string
      reason;  // why not available, or what will be used ("NVIDIA H200, sm_90, software E2M1")
};

// Options the host hands a factory.
struct BackendOptions {
  CacheSpec cache;
  std::optional<Device> device;  // where tensors live; nullopt = the backend's default
                                 // (cuda_nvfp4: cuda:0). A backend refuses a device it cannot use.
  int32_t threads = 0;           // CPU backends: worker threads, 0 = hardware concurrency
};

struct PluginDescriptor {
  uint32_t abi_version;  // always first: kPluginAbiVersion when built
  BuildFingerprint build;
  const char* name;     // unique among loaded plugins: "reference_cpu"
  const char* version;  // the plugin's own version
  const char* formats;  // what it writes, for `kvq backends`: "nvfp4"
  const char* layouts;  // "HND,NHD x linear,sm100_swizzled"

  Status (*probe)(ProbeResult* out) noexcept;
  // On success *out owns a new object (destroy with delete: the destructor is virtual).
  Status (*create_writer)(const BackendOptions& options, KVCacheWriter** out) noexcept;
  Status (*create_reader)(const BackendOptions& options, KVCacheReader** out) noexcept;
  // Memory, copies and timing for the device options.device resolves to. nullptr for backends
  // that work on host memory (the host then uses kvq::host_runtime()).
  Status (*create_runtime)(const BackendOptions& options, DeviceRuntime** out) noexcept;
};

using PluginEntryFn = const PluginDescriptor*();

// The host's own fingerprint; plugins fill theirs with KVQ_BUILD_FINGERPRINT.
KVQ_API BuildFingerprint host_build_fingerprint() noexcept;

}  // namespace kvq

#define KVQ_STRINGIFY_IMPL(x) #x
#define KVQ_STRINGIFY(x) KVQ_STRINGIFY_IMPL(x)
#if defined(__clang__)
#define KVQ_COMPILER_ID "clang " KVQ_STRINGIFY(__clang_major__)
#elif defined(__GNUC__)
#define KVQ_COMPILER_ID "gcc " KVQ_STRINGIFY(__GNUC__)
#else
#define KVQ_COMPILER_ID "unknown"
#endif
// spdlog's version stands for the logging libraries (Debian's spdlog is built on its fmt).
#define KVQ_LOG_LIBS_ID                                                                            \
  "spdlog " KVQ_STRINGIFY(SPDLOG_VER_MAJOR) "." KVQ_STRINGIFY(SPDLOG_VER_MINOR) "." KVQ_STRINGIFY( \
      SPDLOG_VER_PATCH)
#if defined(_GLIBCXX_USE_CXX11_ABI)
#define KVQ_CXX_ABI_ID \
  "libstdc++ cxx11-abi=" KVQ_STRINGIFY(_GLIBCXX_USE_CXX11_ABI) ", " KVQ_LOG_LIBS_ID
#else
#define KVQ_CXX_ABI_ID "other, " KVQ_LOG_LIBS_ID
#endif
// The fingerprint as compiled into the current translation unit.
#define KVQ_BUILD_FINGERPRINT                           \
  ::kvq::BuildFingerprint {                             \
    KVQ_COMPILER_ID, KVQ_CXX_ABI_ID, KVQ_VERSION_STRING \
  }

// Exports `fn` (a `const kvq::PluginDescriptor* fn()`) as the plugin's one entry point.
#include <boost/dll/alias.hpp>
#define KVQ_DEFINE_BACKEND(fn) BOOST_DLL_ALIAS(fn, kvq_backend_entry)
