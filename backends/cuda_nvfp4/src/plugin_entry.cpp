// The cuda_nvfp4 plugin's one exported entry (KVQ_DEFINE_BACKEND): NVFP4 pages written and read
// by CUDA kernels on Hopper (sm_90a, software E2M1) and Blackwell (sm_100a, hardware E2M1).
#include "cuda_device_runtime.h"
#include "cuda_writer.h"
#include "kvq/core/plugin_abi.h"
#include "probe.h"

namespace {

kvq::Status cuda_probe(kvq::ProbeResult* out) noexcept {
  return kvq::cuda_nvfp4::probe(out);
}

kvq::Status cuda_create_writer(const kvq::BackendOptions& options,
                               kvq::KVCacheWriter** out) noexcept {
  return kvq::cuda_nvfp4::CudaNvfp4Writer::create(options, out);
}

kvq::Status cuda_create_reader(const kvq::BackendOptions& options,
                               kvq::KVCacheReader** out) noexcept {
  return kvq::cuda_nvfp4::CudaNvfp4Reader::create(options, out);
}

const kvq::PluginDescriptor* cuda_nvfp4_entry() {
  static const kvq::PluginDescriptor descriptor{
      kvq::kPluginAbiVersion,
      KVQ_BUILD_FINGERPRINT,
      "cuda_nvfp4",
      "0.1.0",
      "nvfp4",
      "HND,NHD x linear,sm100_swizzled",
      &cuda_probe,
      &cuda_create_writer,
      &cuda_create_reader,
      &kvq::make_cuda_device_runtime,
  };
  return &descriptor;
}

}  // namespace

KVQ_DEFINE_BACKEND(cuda_nvfp4_entry)
