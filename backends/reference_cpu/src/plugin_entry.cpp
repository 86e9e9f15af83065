// The reference_cpu plugin's one exported entry (kvq_plugin_entry): the writer, reader and decode
// attention of the static library the unit tests link too, behind the C boundary
// (kvq/abi/plugin.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>

#include "backend_options.h"
#include "kvq/abi/plugin_cpp.h"
#include "kvq/core/plugin_glue.h"
#include "kvq/core/version.h"
#include "kvq/reference_cpu/reference_attention.h"
#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"

namespace {

using namespace kvq;

// The host has checked the contract against requirements(): straight to the work.
class Writer {
 public:
  Writer(const PageLayout& layout, int threads) : impl_(layout, threads) {}
  const kvq_requirements& requirements() const { return reference_cpu::requirements(); }
  Status write(const kvq_write_args& a) {
    return catch_as_status([&] { throw_if_error(impl_.write_checked(to_write_args(a))); });
  }
  Status take_out_of_range_slots(int64_t* count) { return impl_.take_out_of_range_slots(count); }

 private:
  reference_cpu::ReferenceWriter impl_;
};

class Reader {
 public:
  Reader(const PageLayout& layout, int threads) : impl_(layout, threads) {}
  const kvq_requirements& requirements() const { return reference_cpu::requirements(); }
  Status read(const kvq_read_args& a) {
    return catch_as_status([&] { throw_if_error(impl_.read_checked(to_read_args(a))); });
  }

 private:
  reference_cpu::ReferenceReader impl_;
};

class Attention {
 public:
  Attention(const PageLayout& layout, int threads) : impl_(layout, threads) {}
  const kvq_requirements& requirements() const { return reference_cpu::attention_requirements(); }
  Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks,
                         uint64_t* bytes) const {
    return impl_.workspace_bytes(num_seqs, num_q_heads, max_blocks, bytes);
  }
  Status attend(const kvq_attention_args& a) {
    return catch_as_status([&] { throw_if_error(impl_.attend_checked(to_attention_args(a))); });
  }
  Status take_out_of_range(kvq_attention_counts* counts) {
    counts->block_ids = 0;  // the host checks every value before an attend: nothing is skipped
    counts->seq_lens = 0;
    if (counts->struct_size >= offsetof(kvq_attention_counts, scales) + sizeof(counts->scales)) {
      counts->scales = 0;
    }
    return Status::ok();
  }

 private:
  reference_cpu::ReferenceAttention impl_;
};

int32_t init(const kvq_host* host, kvq_error* err) {
  return abi::keep_host(host, err);
}

int32_t probe(kvq_probe* out, kvq_error* err) {
  static const std::string reason = fmt::format("host memory, {} hardware threads",
                                                std::max(1u, std::thread::hardware_concurrency()));
  return abi::guard(err, [&] {
    out->available = 1;
    out->score = 10;  // the fallback: any accelerated backend that is available wins `auto`
    out->reason = reason.c_str();
  });
}

int32_t create_writer(const kvq_backend_options* o, kvq_writer** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      const int threads = reference_cpu::check_backend_options(requested_device(*o), o->threads);
      *out = abi::new_writer<Writer>(options_layout(*o), threads);
    });
  });
}

int32_t create_reader(const kvq_backend_options* o, kvq_reader** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      const int threads = reference_cpu::check_backend_options(requested_device(*o), o->threads);
      *out = abi::new_reader<Reader>(options_layout(*o), threads);
    });
  });
}

int32_t create_attention(const kvq_backend_options* o, kvq_attention** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      const int threads = reference_cpu::check_backend_options(requested_device(*o), o->threads);
      *out = abi::new_attention<Attention>(options_layout(*o), threads);
    });
  });
}

const kvq_plugin* entry() {
  static const kvq_plugin plugin{
      KVQ_PLUGIN_ABI_VERSION,
      sizeof(kvq_plugin),
      "reference_cpu",
      KVQ_VERSION_STRING,
      "nvfp4,fp8_e4m3,fp8_e5m2,bf16",
      "HND,NHD x linear,sm100_swizzled",
      "bf16,f16,f32",
      &init,
      &probe,
      &create_writer,
      &create_reader,
      nullptr,  // host memory: the host uses kvq::host_runtime()
      &create_attention,
  };
  return &plugin;
}

}  // namespace

KVQ_PLUGIN_EXPORT_ENTRY(entry)
