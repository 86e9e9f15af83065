#pragma once
// What the writer and the reader take from BackendOptions besides the cache.
#include <optional>

#include "kvq/core/tensor_view.h"

namespace kvq::reference_cpu {

// Refuses any device but the CPU (ErrorCode::unavailable) and a negative thread count
// (invalid_argument); returns the worker thread count (0 -> hardware concurrency).
int check_backend_options(const std::optional<Device>& device, int threads);

}  // namespace kvq::reference_cpu
