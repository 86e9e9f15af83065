// The thread's last error, strings and versions.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "capi_objects.h"
#include "kvq/core/logging.h"
#include "kvq/core/version.h"

namespace kvq::capi {
namespace {
thread_local std::string last_message;
thread_local std::string last_key;
}  // namespace

kvq_capi_status fail(ErrorCode code, std::string message, std::string key) noexcept {
  try {
    last_message = std::move(message);
    last_key = std::move(key);
  } catch (...) {  // out of memory while recording: the code still says what kind of failure
    last_message.clear();
    last_key.clear();
  }
  const auto c = static_cast<kvq_capi_status>(code);
  return c == 0 ? static_cast<kvq_capi_status>(ErrorCode::internal) : c;
}

kvq_capi_status fail(const Status& s) noexcept {
  return fail(s.code(), s.message(), s.key());
}

void require(const void* p, const char* function, const char* name) {
  if (p == nullptr) {
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: {} is NULL", function, name));
  }
}

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace kvq::capi

extern "C" {

int32_t kvq_capi_version(void) {
  return KVQ_CAPI_VERSION;
}
const char* kvq_capi_kvq_version(void) {
  return KVQ_VERSION_STRING;
}
const char* kvq_capi_last_error_message(void) {
  return kvq::capi::last_message.c_str();
}
const char* kvq_capi_last_error_key(void) {
  return kvq::capi::last_key.c_str();
}
void kvq_capi_string_free(char* s) {
  std::free(s);
}

kvq_capi_status kvq_capi_set_log_level(const char* level) {
  return kvq::capi::guard([&] {
    kvq::capi::require(level, "kvq_capi_set_log_level", "level");
    if (!kvq::is_log_level(level)) {
      throw kvq::Error(kvq::ErrorCode::invalid_argument,
                       fmt::format("log level '{}': expected {}", kvq::message_text(level),
                                   kvq::log_level_words()));
    }
    kvq::set_log_level(level);
  });
}

}  // extern "C"
