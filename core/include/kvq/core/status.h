#pragma once
// Errors. Inside the host, failures are thrown as kvq::Error; across the plugin boundary they
// travel as kvq::Status (plugin-facing virtuals are noexcept, TensorRT-style). Messages say what
// was expected, what was found and where: "slot_mapping[17] = 4096: expected < 4096 (num_blocks
// 256 * block_size 16)".
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "kvq/core/export.h"

namespace kvq {

enum class ErrorCode : int32_t {
  ok = 0,
  invalid_argument = 1,  // bad input from the caller: shapes, dtypes, values, config
  out_of_range = 2,      // an index (slot, offset) past its bound
  not_found = 3,         // a file, backend or tensor that does not exist
  unavailable = 4,       // a backend that cannot run here (no CUDA device, ...)
  io = 5,                // reading/writing files
  runtime = 6,           // a failure while running (CUDA error, ...)
  internal = 7,          // a bug in kvq
};

KVQ_API const char* error_code_name(ErrorCode code) noexcept;

// Text from a file or a user (a tensor name, a YAML scalar) as a message shows it: control bytes
// escaped (\n, \t, \xNN), cut after `max_bytes` at a UTF-8 character boundary with "..." added.
// Messages are one line: a hostile name can neither forge a second line nor flood the terminal.
KVQ_API std::string message_text(std::string_view text, std::size_t max_bytes = 64);

class KVQ_API Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message, std::string key = {})
      : code_(code), message_(std::move(message)), key_(std::move(key)) {}
  static Status ok() { return {}; }

  bool is_ok() const noexcept { return code_ == ErrorCode::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // The config key at fault, when there is one ("cache.head_size"): it crosses the plugin
  // boundary with the status, so a backend's layout error points at the same FILE:LINE:COL.
  const std::string& key() const noexcept { return key_; }

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
  std::string key_;
};

// What host code throws. `key` optionally names the config key at fault ("cache.head_size"), so
// the config layer can turn the error into FILE:LINE:COL.
class KVQ_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, std::string key = {})
      : std::runtime_error(message), code_(code), key_(std::move(key)) {}
  explicit Error(const Status& s) : Error(s.code(), s.message(), s.key()) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& key() const noexcept { return key_; }
  Status status() const { return {code_, what(), key_}; }

 private:
  ErrorCode code_;
  std::string key_;
};

// Throws when `s` is an error.
inline void throw_if_error(const Status& s) {
  if (!s.is_ok()) throw Error(s);
}

// Runs `fn` and turns any exception into a Status: the body of every noexcept plugin entry.
template <class Fn>
Status catch_as_status(Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return Status::ok();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::exception& e) {
    return {ErrorCode::internal, e.what()};
  } catch (...) {
    return {ErrorCode::internal, "unknown exception"};
  }
}

}  // namespace kvq
