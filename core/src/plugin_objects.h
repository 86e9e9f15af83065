#pragma once
// Private to core: a plugin's C objects (kvq_writer, kvq_reader, kvq_attention, kvq_runtime) behind
// the host's C++ interfaces. Each holds its plugin (so the library outlives it) and destroys the C
// object through its own table. Writers and readers check the contract before every call crosses.
#include <memory>

#include "kvq/abi/plugin.h"
#include "kvq/core/attention.h"
#include "kvq/core/device_runtime.h"
#include "kvq/core/kv_cache.h"
#include "plugin_loader.h"

namespace kvq::detail {

std::shared_ptr<KVCacheWriter> wrap_writer(std::shared_ptr<const LoadedPlugin> plugin,
                                           kvq_writer* writer, const PageLayout& layout);
std::shared_ptr<KVCacheReader> wrap_reader(std::shared_ptr<const LoadedPlugin> plugin,
                                           kvq_reader* reader, const PageLayout& layout);
std::shared_ptr<KVCacheAttention> wrap_attention(std::shared_ptr<const LoadedPlugin> plugin,
                                                 kvq_attention* attention,
                                                 const PageLayout& layout);
std::shared_ptr<DeviceRuntime> wrap_runtime(std::shared_ptr<const LoadedPlugin> plugin,
                                            kvq_runtime* runtime);

// A kvq_error as the host's Status (message copied: the plugin owns the original).
Status to_status(const kvq_error& err);

// A view as the DLTensor that crosses; `view` must outlive the result (shape and strides point
// into it).
DLTensor to_dlpack(const TensorView& view);

}  // namespace kvq::detail
