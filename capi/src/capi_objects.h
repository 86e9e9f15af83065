#pragma once
// What the C API's opaque handles hold, and the guard that turns every exception into a status
// and a thread-local message (nothing is thrown across the C boundary).
#include <memory>
#include <string>
#include <utility>

#include "kvq/capi.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"
#include "kvq/core/status.h"
#include "kvq/io/config.h"
#include "kvq/io/open_backend.h"

struct kvq_capi_config {
  kvq::Config config;
  std::unique_ptr<kvq::PageLayout> layout;  // built and checked at load, as the kvq commands do
};

struct kvq_capi_backend {
  kvq::Config config;  // for errors a backend pins on a config key (FILE:LINE:COL)
  kvq::OpenedBackend opened;
};

struct kvq_capi_writer {
  std::shared_ptr<kvq::KVCacheWriter> writer;  // keeps the plugin loaded
  std::string device;                          // "cpu", "cuda:0"
};

struct kvq_capi_reader {
  std::shared_ptr<kvq::KVCacheReader> reader;
  std::string device;
};

namespace kvq::capi {

// Records a failure for kvq_capi_last_error_*() and returns its code.
kvq_capi_status fail(ErrorCode code, std::string message, std::string key = {}) noexcept;
kvq_capi_status fail(const Status& s) noexcept;

// Runs `fn`; any exception becomes the returned status and the thread's last error.
template <class Fn>
kvq_capi_status guard(Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return 0;
  } catch (const Error& e) {
    return fail(e.code(), e.what(), e.key());
  } catch (const std::bad_alloc&) {
    return fail(ErrorCode::runtime, "out of host memory");
  } catch (const std::exception& e) {
    return fail(ErrorCode::internal, e.what());
  } catch (...) {
    return fail(ErrorCode::internal, "unknown exception");
  }
}

// Throws invalid_argument "FUNCTION: NAME is NULL" for a null pointer argument.
void require(const void* p, const char* function, const char* name);

// A JSON text the caller frees with kvq_capi_string_free().
char* copy_string(const std::string& s);

}  // namespace kvq::capi
