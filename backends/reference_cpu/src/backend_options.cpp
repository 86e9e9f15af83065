#include "backend_options.h"

#include <fmt/format.h>

#include "kvq/core/status.h"
#include "parallel_for.h"

namespace kvq::reference_cpu {

int check_backend_options(const BackendOptions& options) {
  if (options.device && *options.device != Device::cpu()) {
    throw Error(ErrorCode::unavailable,
                fmt::format("reference_cpu works on host memory: device {} is not supported "
                            "(use device: cpu or auto)",
                            to_string(*options.device)),
                "device");
  }
  if (options.threads < 0) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("threads = {}: expected >= 0 (0 = one per hardware thread)", options.threads),
        "threads");
  }
  return resolve_threads(options.threads);
}

}  // namespace kvq::reference_cpu
