// The reference_cpu plugin's one exported entry (kvq_backend_entry). Everything else lives in the
// static library the unit tests link too.
#include <fmt/format.h>

#include <thread>

#include "kvq/core/plugin_abi.h"
#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"

namespace {

using namespace kvq;

Status probe(ProbeResult* out) noexcept {
  return catch_as_status([&] {
    out->available = true;
    out->score = 10;  // the fallback: any accelerated backend that is available wins `auto`
    out->reason = fmt::format("host memory, {} hardware threads",
                              std::max(1u, std::thread::hardware_concurrency()));
  });
}

Status create_writer(const BackendOptions& options, KVCacheWriter** out) noexcept {
  return catch_as_status([&] { *out = new reference_cpu::ReferenceWriter(options); });
}

Status create_reader(const BackendOptions& options, KVCacheReader** out) noexcept {
  return catch_as_status([&] { *out = new reference_cpu::ReferenceReader(options); });
}

const PluginDescriptor* entry() {
  static const PluginDescriptor descriptor{
      kPluginAbiVersion,
      KVQ_BUILD_FINGERPRINT,
      "reference_cpu",
      KVQ_VERSION_STRING,
      "nvfp4",
      "HND,NHD x linear,sm100_swizzled",
      &probe,
      &create_writer,
      &create_reader,
      nullptr,  // host memory: the host uses kvq::host_runtime()
  };
  return &descriptor;
}

}  // namespace

KVQ_DEFINE_BACKEND(entry)
