// The cuda plugin's one exported entry (kvq_plugin_entry): nvfp4, fp8_e4m3, fp8_e5m2 and bf16
// pages written and read by CUDA kernels on Hopper (sm_90a, software E2M1) and Blackwell
// (sm_100a, hardware E2M1), behind the C boundary (kvq/abi/plugin.h). The objects are the static
// library's, which the tests link.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cuda_attention.h"
#include "cuda_device_runtime.h"
#include "cuda_writer.h"
#include "kvq/abi/plugin_cpp.h"
#include "kvq/core/plugin_glue.h"
#include "kvq/core/version.h"
#include "probe.h"

namespace {

using namespace kvq;
using cuda::CudaReader;
using cuda::CudaWriter;

// The host has checked the contract against requirements(): straight to the planning and launch.
class Writer {
 public:
  explicit Writer(CudaWriter* impl) : impl_(impl) {}
  const kvq_requirements& requirements() const { return impl_->requirements(); }
  Status write(const kvq_write_args& a) {
    return catch_as_status([&] { throw_if_error(impl_->write_checked(to_write_args(a))); });
  }
  Status take_out_of_range_slots(int64_t* count) { return impl_->take_out_of_range_slots(count); }

 private:
  std::unique_ptr<CudaWriter> impl_;
};

class Reader {
 public:
  explicit Reader(CudaReader* impl) : impl_(impl) {}
  const kvq_requirements& requirements() const { return impl_->requirements(); }
  Status read(const kvq_read_args& a) {
    return catch_as_status([&] { throw_if_error(impl_->read_checked(to_read_args(a))); });
  }

 private:
  std::unique_ptr<CudaReader> impl_;
};

class Attention {
 public:
  explicit Attention(cuda::CudaAttention* impl) : impl_(impl) {}
  const kvq_requirements& requirements() const { return impl_->requirements(); }
  Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks,
                         uint64_t* bytes) const {
    return impl_->workspace_bytes(num_seqs, num_q_heads, max_blocks, bytes);
  }
  Status attend(const kvq_attention_args& a) {
    return catch_as_status([&] { throw_if_error(impl_->attend_checked(to_attention_args(a))); });
  }
  Status take_out_of_range(kvq_attention_counts* counts) {
    AttentionOutOfRange c;
    if (Status s = impl_->take_out_of_range(&c); !s) return s;
    counts->block_ids = c.block_ids;
    counts->seq_lens = c.seq_lens;
    if (counts->struct_size >= offsetof(kvq_attention_counts, scales) + sizeof(counts->scales)) {
      counts->scales = c.scales;
    }
    return Status::ok();
  }

 private:
  std::unique_ptr<cuda::CudaAttention> impl_;
};

// The runtime's C++ interface as the C table wants it.
class Runtime {
 public:
  explicit Runtime(DeviceRuntime* impl) : impl_(impl), name_(impl->device_name()) {}
  kvq_device device() const { return to_abi(impl_->device()); }
  const char* device_name() const { return name_.c_str(); }
  void* stream() const { return impl_->stream(); }
  Status allocate(size_t bytes, void** out) { return impl_->allocate(bytes, out); }
  Status release(void* ptr) { return impl_->release(ptr); }
  Status copy(void* dst, const void* src, size_t bytes, int32_t kind) {
    return impl_->copy(dst, src, bytes, static_cast<CopyKind>(kind));
  }
  Status fill(void* dst, uint8_t byte, size_t bytes) { return impl_->fill(dst, byte, bytes); }
  Status synchronize() { return impl_->synchronize(); }
  Status time(int32_t (*launch)(void*, void*), void* context, int32_t warmup, int32_t iterations,
              int32_t graph, int32_t launches_per_graph, double* out) {
    struct Call {
      int32_t (*launch)(void*, void*);
      void* context;
    } call{launch, context};
    // The host's launch reports a kvq_error code; the runtime wants a Status. The host keeps its
    // own message (plugin_objects.cpp), so the code is all that needs to cross back.
    const LaunchFn fn = [](void* c, void* stream) noexcept -> Status {
      auto* k = static_cast<Call*>(c);
      const int32_t code = k->launch(k->context, stream);
      if (code == KVQ_OK) return Status::ok();
      return {static_cast<ErrorCode>(code), "the timed launch failed"};
    };
    TimingOptions o;
    o.warmup = warmup;
    o.iterations = iterations;
    o.graph = graph != 0;
    o.launches_per_graph = launches_per_graph;
    std::vector<double> ms;
    if (Status s = impl_->time(fn, &call, o, &ms); !s) return s;
    for (size_t i = 0; i < ms.size() && i < static_cast<size_t>(iterations); ++i) out[i] = ms[i];
    return Status::ok();
  }
  Status copy_bandwidth(size_t bytes, double* out) { return impl_->copy_bandwidth(bytes, out); }

 private:
  std::unique_ptr<DeviceRuntime> impl_;
  std::string name_;
};

int32_t init(const kvq_host* host, kvq_error* err) {
  return abi::keep_host(host, err);
}

int32_t probe(kvq_probe* out, kvq_error* err) {
  // Probed once per process (the loader keeps the plugin): the reason lives as long as it.
  static cuda::ProbeResult result;
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      throw_if_error(cuda::probe(&result));
      out->available = result.available ? 1 : 0;
      out->score = result.score;
      out->reason = result.reason.c_str();
    });
  });
}

int32_t create_writer(const kvq_backend_options* o, kvq_writer** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      CudaWriter* w = nullptr;
      throw_if_error(CudaWriter::create(options_layout(*o), requested_device(*o), &w));
      *out = abi::new_writer<Writer>(w);
    });
  });
}

int32_t create_reader(const kvq_backend_options* o, kvq_reader** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      CudaReader* r = nullptr;
      throw_if_error(CudaReader::create(options_layout(*o), requested_device(*o), &r));
      *out = abi::new_reader<Reader>(r);
    });
  });
}

int32_t create_attention(const kvq_backend_options* o, kvq_attention** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      cuda::CudaAttention* a = nullptr;
      throw_if_error(cuda::CudaAttention::create(options_layout(*o), requested_device(*o), &a));
      *out = abi::new_attention<Attention>(a);
    });
  });
}

int32_t create_runtime(const kvq_backend_options* o, kvq_runtime** out, kvq_error* err) {
  return abi::guard(err, [&] {
    return catch_as_status([&] {
      BackendOptions options;
      options.device = requested_device(*o);
      DeviceRuntime* rt = nullptr;
      throw_if_error(make_cuda_device_runtime(options, &rt));
      *out = abi::new_runtime<Runtime>(rt);
    });
  });
}

const kvq_plugin* entry() {
  static const kvq_plugin plugin{
      KVQ_PLUGIN_ABI_VERSION,
      sizeof(kvq_plugin),
      "cuda",
      KVQ_VERSION_STRING,
      "nvfp4,fp8_e4m3,fp8_e5m2,bf16",
      "HND,NHD x linear,sm100_swizzled",
      "bf16,f16,f32",
      &init,
      &probe,
      &create_writer,
      &create_reader,
      &create_runtime,
      &create_attention,
  };
  return &plugin;
}

}  // namespace

KVQ_PLUGIN_EXPORT_ENTRY(entry)
