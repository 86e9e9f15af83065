#include "kvq/core/status.h"

namespace kvq {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::out_of_range: return "out of range";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::io: return "i/o error";
    case ErrorCode::runtime: return "runtime error";
    case ErrorCode::internal: return "internal error";
  }
  return "unknown error";
}

}  // namespace kvq
