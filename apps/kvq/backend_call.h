#pragma once
// What `kvq write` and `kvq read` do alike around their one backend call, so that both report a
// misplaced backend and a failed call in the same words.
#include <fmt/format.h>

#include <string>

#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq::app {

// Throws (internal) when the backend's writer or reader (`role`) is not on its runtime's device:
// the staged tensors would be on the wrong device.
inline void check_same_device(const std::string& backend, const char* role, Device worker,
                              Device runtime) {
  if (!(worker == runtime)) {
    throw Error(ErrorCode::internal,
                fmt::format("backend '{}': its {} is on {} but its runtime on {}", backend, role,
                            to_string(worker), to_string(runtime)));
  }
}

// Throws a failed call's Status with its code, naming the backend either way: first `input` when
// the input was at fault (invalid_argument, out_of_range), with the backend that refused it at
// the end (a plugin may refuse what another takes: a dtype, a layout); first the backend
// otherwise.
inline void throw_if_failed(const Status& s, const std::string& input, const std::string& backend) {
  if (s) return;
  const bool input_at_fault =
      s.code() == ErrorCode::invalid_argument || s.code() == ErrorCode::out_of_range;
  throw Error(s.code(), input_at_fault ? fmt::format("{}: {} (refused by backend {})", input,
                                                     s.message(), backend)
                                       : fmt::format("backend {}: {}", backend, s.message()));
}

}  // namespace kvq::app
