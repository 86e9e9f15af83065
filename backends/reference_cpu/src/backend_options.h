#pragma once
// What the writer and the reader take from BackendOptions besides the CacheSpec.
#include "kvq/core/plugin_abi.h"

namespace kvq::reference_cpu {

// Refuses any device but the CPU (ErrorCode::unavailable) and a negative thread count
// (invalid_argument); returns the worker thread count (0 -> hardware concurrency).
int check_backend_options(const BackendOptions& options);

}  // namespace kvq::reference_cpu
