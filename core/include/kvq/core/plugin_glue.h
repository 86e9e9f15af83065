#pragma once
// For backends that link kvq's own libraries (reference_cpu, cuda): the C arguments that
// crossed the boundary as the host's C++ types, so such a backend is written against WriteArgs,
// TensorView and Status, and the same class serves as a plugin or linked in. Out-of-tree plugins
// need none of this (kvq/abi/plugin_cpp.h).
#include <optional>

#include "kvq/abi/plugin.h"
#include "kvq/core/attention.h"
#include "kvq/core/export.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"

namespace kvq {

// Views of the DLTensors (kvq::from_dlpack); throws kvq::Error for a tensor kvq cannot describe.
KVQ_API WriteArgs to_write_args(const kvq_write_args& args);
KVQ_API ReadArgs to_read_args(const kvq_read_args& args);
KVQ_API AttentionArgs to_attention_args(const kvq_attention_args& args);

// Device <-> the ABI's kvq_device.
KVQ_API kvq_device to_abi(Device d);
KVQ_API Device from_abi(kvq_device d);

// The device the host asked for, or nullopt for the backend's default.
KVQ_API std::optional<Device> requested_device(const kvq_backend_options& options);

// The cache the options describe.
inline PageLayout options_layout(const kvq_backend_options& options) {
  return PageLayout(*options.page);
}

}  // namespace kvq
