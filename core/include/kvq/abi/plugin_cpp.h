// The plugin side of the boundary for C++ authors: turns a class into kvq_writer / kvq_reader /
// kvq_attention / kvq_runtime tables, errors into kvq_error, and logs into the host's callback.
// Header-only C++17 on the C ABI (kvq/abi/plugin.h) alone: no kvq library, spdlog or fmt, any
// compiler.
//
//   class MyWriter {                                  // a writer is any class with these three
//    public:
//     const kvq_requirements& requirements() const;   // what it needs beyond the contract
//     void write(const kvq_write_args& args);         // throw kvq::abi::Failure on an error
//     void take_out_of_range_slots(int64_t* count);
//   };
//   *out = kvq::abi::new_writer<MyWriter>(constructor args...);   // in create_writer
//
// A method may instead return an object with is_ok(), code(), message() and key() (kvq::Status,
// for plugins that link kvq's own libraries): an error it returns crosses the same way.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "kvq/abi/plugin.h"

namespace kvq::abi {

// An error a plugin method throws: it reaches the host as code + message (+ config key).
struct Failure {
  int32_t code = KVQ_ERR_INVALID_ARGUMENT;
  std::string message;
  std::string key;
};

// Fills *err from this thread's slot: the message stays valid until this thread's next failure
// reported through here (the ABI's "until the callee's next call on this thread").
inline int32_t report(kvq_error* err, int32_t code, std::string message, std::string key = {}) {
  thread_local std::string message_slot;
  thread_local std::string key_slot;
  message_slot = std::move(message);
  key_slot = std::move(key);
  if (err != nullptr) {
    err->code = code;
    err->message = message_slot.c_str();
    err->key = key_slot.empty() ? nullptr : key_slot.c_str();
  }
  return code;
}

namespace detail {

template <class R>
int32_t take_result(R&& r, kvq_error* err) {
  if constexpr (std::is_void_v<std::decay_t<R>>) {
    return KVQ_OK;
  } else {
    if (r.is_ok()) return KVQ_OK;
    return report(err, static_cast<int32_t>(r.code()), std::string(r.message()),
                  std::string(r.key()));
  }
}

}  // namespace detail

// Runs fn() and turns what it throws or returns into the ABI's int32_t + kvq_error: the body of
// every function that crosses the boundary. Nothing escapes it.
template <class Fn>
int32_t guard(kvq_error* err, Fn&& fn) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      return KVQ_OK;
    } else {
      return detail::take_result(fn(), err);
    }
  } catch (const Failure& f) {
    return report(err, f.code, f.message, f.key);
  } catch (const std::bad_alloc&) {
    return report(err, KVQ_ERR_RUNTIME, "out of host memory");
  } catch (const std::exception& e) {
    return report(err, KVQ_ERR_INTERNAL, e.what());
  } catch (...) {
    return report(err, KVQ_ERR_INTERNAL, "unknown exception");
  }
}

// ---- logging through the host ------------------------------------------------------------------

// The host's callbacks, kept by the plugin's init (one per plugin library: each has its own copy
// of this inline variable).
inline kvq_host g_host{};

inline int32_t keep_host(const kvq_host* host, kvq_error* err) {
  if (host == nullptr || host->struct_size < sizeof(kvq_host) || host->log == nullptr ||
      host->log_enabled == nullptr) {
    return report(err, KVQ_ERR_INVALID_ARGUMENT, "init: the host passed no usable kvq_host");
  }
  g_host = *host;
  return KVQ_OK;
}

inline bool log_enabled(int32_t level) {
  return g_host.log_enabled != nullptr && g_host.log_enabled(g_host.context, level) != 0;
}

inline void log(int32_t level, const std::string& message) {
  if (log_enabled(level)) g_host.log(g_host.context, level, message.c_str());
}

// ---- objects ------------------------------------------------------------------------------------

template <class T>
struct WriterBox {
  kvq_writer base;
  T impl;
  template <class... A>
  explicit WriterBox(const kvq_writer_ops* ops, A&&... a)
      : base{ops}, impl(std::forward<A>(a)...) {}
  static T& of(kvq_writer* w) { return reinterpret_cast<WriterBox*>(w)->impl; }
  static const T& of(const kvq_writer* w) { return reinterpret_cast<const WriterBox*>(w)->impl; }
};

template <class T>
const kvq_writer_ops* writer_ops() {
  using Box = WriterBox<T>;
  static const kvq_writer_ops ops{
      sizeof(kvq_writer_ops),
      [](kvq_writer* self) { delete reinterpret_cast<Box*>(self); },
      [](const kvq_writer* self) -> const kvq_requirements* {
        return &Box::of(self).requirements();
      },
      [](kvq_writer* self, const kvq_write_args* args, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).write(*args); });
      },
      [](kvq_writer* self, int64_t* count, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).take_out_of_range_slots(count); });
      },
  };
  return &ops;
}

// A new writer of class T (constructed from `a`), as create_writer returns it. `base` must be the
// first member, so a kvq_writer* is a WriterBox*.
template <class T, class... A>
kvq_writer* new_writer(A&&... a) {
  return &(new WriterBox<T>(writer_ops<T>(), std::forward<A>(a)...))->base;
}

template <class T>
struct ReaderBox {
  kvq_reader base;
  T impl;
  template <class... A>
  explicit ReaderBox(const kvq_reader_ops* ops, A&&... a)
      : base{ops}, impl(std::forward<A>(a)...) {}
  static T& of(kvq_reader* r) { return reinterpret_cast<ReaderBox*>(r)->impl; }
  static const T& of(const kvq_reader* r) { return reinterpret_cast<const ReaderBox*>(r)->impl; }
};

template <class T>
const kvq_reader_ops* reader_ops() {
  using Box = ReaderBox<T>;
  static const kvq_reader_ops ops{
      sizeof(kvq_reader_ops),
      [](kvq_reader* self) { delete reinterpret_cast<Box*>(self); },
      [](const kvq_reader* self) -> const kvq_requirements* {
        return &Box::of(self).requirements();
      },
      [](kvq_reader* self, const kvq_read_args* args, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).read(*args); });
      },
  };
  return &ops;
}

template <class T, class... A>
kvq_reader* new_reader(A&&... a) {
  return &(new ReaderBox<T>(reader_ops<T>(), std::forward<A>(a)...))->base;
}

// An attention is any class with requirements(), workspace_bytes(num_seqs, num_q_heads,
// max_blocks_per_seq, uint64_t*), attend(const kvq_attention_args&) and
// take_out_of_range(kvq_attention_counts*).
template <class T>
struct AttentionBox {
  kvq_attention base;
  T impl;
  template <class... A>
  explicit AttentionBox(const kvq_attention_ops* ops, A&&... a)
      : base{ops}, impl(std::forward<A>(a)...) {}
  static T& of(kvq_attention* p) { return reinterpret_cast<AttentionBox*>(p)->impl; }
  static const T& of(const kvq_attention* p) {
    return reinterpret_cast<const AttentionBox*>(p)->impl;
  }
};

template <class T>
const kvq_attention_ops* attention_ops() {
  using Box = AttentionBox<T>;
  static const kvq_attention_ops ops{
      sizeof(kvq_attention_ops),
      [](kvq_attention* self) { delete reinterpret_cast<Box*>(self); },
      [](const kvq_attention* self) -> const kvq_requirements* {
        return &Box::of(self).requirements();
      },
      [](const kvq_attention* self, int64_t num_seqs, int64_t num_q_heads,
         int64_t max_blocks_per_seq, uint64_t* bytes, kvq_error* err) -> int32_t {
        return guard(err, [&] {
          return Box::of(self).workspace_bytes(num_seqs, num_q_heads, max_blocks_per_seq, bytes);
        });
      },
      [](kvq_attention* self, const kvq_attention_args* args, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).attend(*args); });
      },
      [](kvq_attention* self, kvq_attention_counts* counts, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).take_out_of_range(counts); });
      },
  };
  return &ops;
}

// A new attention of class T, as create_attention returns it.
template <class T, class... A>
kvq_attention* new_attention(A&&... a) {
  return &(new AttentionBox<T>(attention_ops<T>(), std::forward<A>(a)...))->base;
}

// A runtime is any class with device(), device_name(), stream(), allocate(bytes, void**),
// release(ptr), copy(dst, src, bytes, kind), fill(dst, byte, bytes), synchronize(), and, for the
// timing extension, time(launch, context, warmup, iterations, graph, launches_per_graph, out) and
// copy_bandwidth(bytes, double*) (set `timing` false to leave those two out).
template <class T>
struct RuntimeBox {
  kvq_runtime base;
  T impl;
  template <class... A>
  explicit RuntimeBox(const kvq_runtime_ops* ops, A&&... a)
      : base{ops}, impl(std::forward<A>(a)...) {}
  static T& of(kvq_runtime* r) { return reinterpret_cast<RuntimeBox*>(r)->impl; }
  static const T& of(const kvq_runtime* r) { return reinterpret_cast<const RuntimeBox*>(r)->impl; }
};

template <class T>
const kvq_runtime_ops* runtime_ops() {
  using Box = RuntimeBox<T>;
  static const kvq_runtime_ops ops{
      sizeof(kvq_runtime_ops),
      [](kvq_runtime* self) { delete reinterpret_cast<Box*>(self); },
      [](const kvq_runtime* self) -> kvq_device { return Box::of(self).device(); },
      [](const kvq_runtime* self) -> const char* { return Box::of(self).device_name(); },
      [](const kvq_runtime* self) -> void* { return Box::of(self).stream(); },
      [](kvq_runtime* self, size_t bytes, void** out, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).allocate(bytes, out); });
      },
      [](kvq_runtime* self, void* ptr, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).release(ptr); });
      },
      [](kvq_runtime* self, void* dst, const void* src, size_t bytes, int32_t kind,
         kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).copy(dst, src, bytes, kind); });
      },
      [](kvq_runtime* self, void* dst, uint8_t byte, size_t bytes, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).fill(dst, byte, bytes); });
      },
      [](kvq_runtime* self, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).synchronize(); });
      },
      [](kvq_runtime* self, int32_t (*launch)(void*, void*), void* context, int32_t warmup,
         int32_t iterations, int32_t graph, int32_t launches_per_graph, double* out,
         kvq_error* err) -> int32_t {
        return guard(err, [&] {
          return Box::of(self).time(launch, context, warmup, iterations, graph, launches_per_graph,
                                    out);
        });
      },
      [](kvq_runtime* self, size_t bytes, double* bytes_per_second, kvq_error* err) -> int32_t {
        return guard(err, [&] { return Box::of(self).copy_bandwidth(bytes, bytes_per_second); });
      },
  };
  return &ops;
}

template <class T, class... A>
kvq_runtime* new_runtime(A&&... a) {
  return &(new RuntimeBox<T>(runtime_ops<T>(), std::forward<A>(a)...))->base;
}

}  // namespace kvq::abi
