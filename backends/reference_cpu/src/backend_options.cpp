#include "backend_options.h"

#include <fmt/format.h>

#include "kvq/core/status.h"
#include "parallel_for.h"

namespace kvq::reference_cpu {

int check_backend_options(const std::optional<Device>& device, int threads) {
  if (device && *device != Device::cpu()) {
    throw Error(ErrorCode::unavailable,
                fmt::format("reference_cpu works on host memory: device {} is not supported "
                            "(use device: cpu or auto)",
                            to_string(*device)),
                "device");
  }
  if (threads < 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("threads = {}: expected >= 0 (0 = one per hardware thread)", threads),
                "threads");
  }
  return resolve_threads(threads);
}

}  // namespace kvq::reference_cpu
