#include "plugin_objects.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "kvq/core/contract.h"
#include "kvq/core/plugin_glue.h"

namespace kvq::detail {

Status to_status(const kvq_error& err) {
  const auto code = err.code >= static_cast<int32_t>(ErrorCode::invalid_argument) &&
                            err.code <= static_cast<int32_t>(ErrorCode::internal)
                        ? static_cast<ErrorCode>(err.code)
                        : ErrorCode::internal;
  std::string message = err.message != nullptr ? message_text(err.message, 4096)
                                               : std::string("(the plugin gave no message)");
  return {code, std::move(message), err.key != nullptr ? message_text(err.key, 128) : ""};
}

DLTensor to_dlpack(const TensorView& v) {
  DLTensor t{};
  t.data = v.data;
  t.device = v.device.is_cuda() ? DLDevice{kDLCUDA, v.device.index} : DLDevice{kDLCPU, 0};
  t.ndim = v.ndim;
  switch (v.dtype) {
    case DType::bf16: t.dtype = {kDLBfloat, 16, 1}; break;
    case DType::f16: t.dtype = {kDLFloat, 16, 1}; break;
    case DType::f32: t.dtype = {kDLFloat, 32, 1}; break;
    case DType::u8: t.dtype = {kDLUInt, 8, 1}; break;
    case DType::i32: t.dtype = {kDLInt, 32, 1}; break;
    case DType::i64: t.dtype = {kDLInt, 64, 1}; break;
  }
  t.shape = const_cast<int64_t*>(v.shape.data());
  t.strides = const_cast<int64_t*>(v.strides.data());
  t.byte_offset = 0;
  return t;
}

namespace {

class PluginWriter final : public KVCacheWriter {
 public:
  PluginWriter(std::shared_ptr<const LoadedPlugin> plugin, kvq_writer* writer,
               const PageLayout& layout)
      : plugin_(std::move(plugin)),
        writer_(writer),
        layout_(layout),
        needs_(*writer->ops->requirements(writer)) {}
  ~PluginWriter() override { writer_->ops->destroy(writer_); }
  PluginWriter(const PluginWriter&) = delete;
  PluginWriter& operator=(const PluginWriter&) = delete;

  Status write(const WriteArgs& a) noexcept override {
    if (Status s = check_write_args(a, layout_, needs_, plugin_->info.name); !s) return s;
    const DLTensor key = to_dlpack(a.key), value = to_dlpack(a.value);
    const DLTensor slots = to_dlpack(a.slot_mapping), cache = to_dlpack(a.cache);
    const DLTensor k_heads = to_dlpack(a.k_head_scales), v_heads = to_dlpack(a.v_head_scales);
    const kvq_write_args args{sizeof(kvq_write_args),
                              &key,
                              &value,
                              &slots,
                              &cache,
                              a.k_scale,
                              a.v_scale,
                              a.k_scale_ptr,
                              a.v_scale_ptr,
                              a.stream,
                              a.k_head_scales.data != nullptr ? &k_heads : nullptr,
                              a.v_head_scales.data != nullptr ? &v_heads : nullptr};
    kvq_error err{};
    if (writer_->ops->write(writer_, &args, &err) != KVQ_OK) return to_status(err);
    return Status::ok();
  }
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return from_abi(needs_.device); }
  Status take_out_of_range_slots(int64_t* count) noexcept override {
    if (count == nullptr) return {ErrorCode::invalid_argument, "count: null pointer"};
    kvq_error err{};
    if (writer_->ops->take_out_of_range_slots(writer_, count, &err) != KVQ_OK) {
      return to_status(err);
    }
    return Status::ok();
  }

 private:
  std::shared_ptr<const LoadedPlugin> plugin_;
  kvq_writer* writer_;
  PageLayout layout_;
  kvq_requirements needs_;
};

class PluginReader final : public KVCacheReader {
 public:
  PluginReader(std::shared_ptr<const LoadedPlugin> plugin, kvq_reader* reader,
               const PageLayout& layout)
      : plugin_(std::move(plugin)),
        reader_(reader),
        layout_(layout),
        needs_(*reader->ops->requirements(reader)) {}
  ~PluginReader() override { reader_->ops->destroy(reader_); }
  PluginReader(const PluginReader&) = delete;
  PluginReader& operator=(const PluginReader&) = delete;

  Status read(const ReadArgs& a) noexcept override {
    if (Status s = check_read_args(a, layout_, needs_, plugin_->info.name); !s) return s;
    const DLTensor cache = to_dlpack(a.cache), slots = to_dlpack(a.slot_mapping);
    const DLTensor key = to_dlpack(a.key), value = to_dlpack(a.value);
    const DLTensor k_heads = to_dlpack(a.k_head_scales), v_heads = to_dlpack(a.v_head_scales);
    const kvq_read_args args{sizeof(kvq_read_args),
                             &cache,
                             &slots,
                             &key,
                             &value,
                             a.k_scale,
                             a.v_scale,
                             a.stream,
                             a.k_head_scales.data != nullptr ? &k_heads : nullptr,
                             a.v_head_scales.data != nullptr ? &v_heads : nullptr};
    kvq_error err{};
    if (reader_->ops->read(reader_, &args, &err) != KVQ_OK) return to_status(err);
    return Status::ok();
  }
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return from_abi(needs_.device); }

 private:
  std::shared_ptr<const LoadedPlugin> plugin_;
  kvq_reader* reader_;
  PageLayout layout_;
  kvq_requirements needs_;
};

class PluginAttention final : public KVCacheAttention {
 public:
  PluginAttention(std::shared_ptr<const LoadedPlugin> plugin, kvq_attention* attention,
                  const PageLayout& layout)
      : plugin_(std::move(plugin)),
        attention_(attention),
        layout_(layout),
        needs_(*attention->ops->requirements(attention)) {}
  ~PluginAttention() override { attention_->ops->destroy(attention_); }
  PluginAttention(const PluginAttention&) = delete;
  PluginAttention& operator=(const PluginAttention&) = delete;

  Status attend(const AttentionArgs& in) noexcept override {
    AttentionArgs a = in;
    if (a.softmax_scale == 0.0f) {
      a.softmax_scale = default_softmax_scale(layout_.geometry().head_size);
    }
    uint64_t needed = 0;
    if (a.query.ndim == 3 && a.block_tables.ndim == 2) {
      if (Status s =
              workspace_bytes(a.query.shape[0], a.query.shape[1], a.block_tables.shape[1], &needed);
          !s) {
        return s;
      }
    }
    if (Status s = check_attention_args(a, layout_, needs_, plugin_->info.name, needed); !s) {
      return s;
    }
    const DLTensor query = to_dlpack(a.query), tables = to_dlpack(a.block_tables);
    const DLTensor lens = to_dlpack(a.seq_lens), cache = to_dlpack(a.cache);
    const DLTensor output = to_dlpack(a.output), workspace = to_dlpack(a.workspace);
    const DLTensor k_heads = to_dlpack(a.k_head_scales), v_heads = to_dlpack(a.v_head_scales);
    kvq_attention_args args{};
    args.struct_size = sizeof(kvq_attention_args);
    args.query = &query;
    args.block_tables = &tables;
    args.seq_lens = &lens;
    args.cache = &cache;
    args.output = &output;
    args.k_scale = a.k_scale;
    args.v_scale = a.v_scale;
    args.k_scale_ptr = a.k_scale_ptr;
    args.v_scale_ptr = a.v_scale_ptr;
    args.k_head_scales = a.k_head_scales.data != nullptr ? &k_heads : nullptr;
    args.v_head_scales = a.v_head_scales.data != nullptr ? &v_heads : nullptr;
    args.softmax_scale = a.softmax_scale;
    args.workspace = needed > 0 ? &workspace : nullptr;
    args.stream = a.stream;
    kvq_error err{};
    if (attention_->ops->attend(attention_, &args, &err) != KVQ_OK) return to_status(err);
    return Status::ok();
  }
  Status workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t max_blocks_per_seq,
                         uint64_t* bytes) const noexcept override {
    if (bytes == nullptr) return {ErrorCode::invalid_argument, "bytes: null pointer"};
    kvq_error err{};
    if (attention_->ops->workspace_bytes(attention_, num_seqs, num_q_heads, max_blocks_per_seq,
                                         bytes, &err) != KVQ_OK) {
      return to_status(err);
    }
    return Status::ok();
  }
  Status take_out_of_range(AttentionOutOfRange* counts) noexcept override {
    if (counts == nullptr) return {ErrorCode::invalid_argument, "counts: null pointer"};
    kvq_attention_counts c{sizeof(kvq_attention_counts), 0, 0, 0};
    kvq_error err{};
    if (attention_->ops->take_out_of_range(attention_, &c, &err) != KVQ_OK) return to_status(err);
    counts->block_ids = c.block_ids;
    counts->seq_lens = c.seq_lens;
    counts->scales = c.scales;  // stays 0 from a plugin built before ABI 2.3
    return Status::ok();
  }
  const PageLayout& layout() const noexcept override { return layout_; }
  Device device() const noexcept override { return from_abi(needs_.device); }

 private:
  std::shared_ptr<const LoadedPlugin> plugin_;
  kvq_attention* attention_;
  PageLayout layout_;
  kvq_requirements needs_;
};

// What a C launch callback needs to call the host's LaunchFn and keep its Status.
struct LaunchContext {
  LaunchFn launch;
  void* context;
  Status failure;
};

int32_t launch_trampoline(void* c, void* stream) {
  auto* ctx = static_cast<LaunchContext*>(c);
  Status s = ctx->launch(ctx->context, stream);
  if (s.is_ok()) return KVQ_OK;
  const auto code = static_cast<int32_t>(s.code());
  ctx->failure = std::move(s);
  return code;
}

class PluginRuntime final : public DeviceRuntime {
 public:
  PluginRuntime(std::shared_ptr<const LoadedPlugin> plugin, kvq_runtime* runtime)
      : plugin_(std::move(plugin)), rt_(runtime), ops_(runtime->ops) {}
  ~PluginRuntime() override { ops_->destroy(rt_); }
  PluginRuntime(const PluginRuntime&) = delete;
  PluginRuntime& operator=(const PluginRuntime&) = delete;

  Device device() const noexcept override { return from_abi(ops_->device(rt_)); }
  std::string device_name() const noexcept override {
    const char* name = ops_->device_name(rt_);
    return name != nullptr ? message_text(name, 256) : std::string("?");
  }
  void* stream() const noexcept override { return ops_->stream(rt_); }

  Status allocate(std::size_t bytes, void** out) noexcept override {
    return call([&](kvq_error* e) { return ops_->allocate(rt_, bytes, out, e); });
  }
  Status release(void* ptr) noexcept override {
    return call([&](kvq_error* e) { return ops_->release(rt_, ptr, e); });
  }
  Status copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) noexcept override {
    return call([&](kvq_error* e) {
      return ops_->copy(rt_, dst, src, bytes, static_cast<int32_t>(kind), e);
    });
  }
  Status fill(void* dst, uint8_t byte, std::size_t bytes) noexcept override {
    return call([&](kvq_error* e) { return ops_->fill(rt_, dst, byte, bytes, e); });
  }
  Status synchronize() noexcept override {
    return call([&](kvq_error* e) { return ops_->synchronize(rt_, e); });
  }
  Status time(LaunchFn launch, void* context, const TimingOptions& o,
              std::vector<double>* milliseconds) noexcept override {
    if (ops_->time == nullptr) {
      return {ErrorCode::unavailable,
              fmt::format("backend '{}' offers no timing", plugin_->info.name)};
    }
    if (milliseconds == nullptr || o.iterations < 0) {
      return {ErrorCode::invalid_argument, "time: no output, or iterations < 0"};
    }
    return catch_as_status([&] {
      milliseconds->assign(static_cast<std::size_t>(o.iterations), 0.0);
      LaunchContext ctx{launch, context, Status::ok()};
      kvq_error err{};
      if (ops_->time(rt_, &launch_trampoline, &ctx, o.warmup, o.iterations, o.graph ? 1 : 0,
                     o.launches_per_graph, milliseconds->data(), &err) != KVQ_OK) {
        throw Error(ctx.failure.is_ok() ? to_status(err) : ctx.failure);
      }
    });
  }
  Status copy_bandwidth(std::size_t bytes, double* bytes_per_second) noexcept override {
    if (ops_->copy_bandwidth == nullptr) {
      return {ErrorCode::unavailable,
              fmt::format("backend '{}' offers no copy bandwidth", plugin_->info.name)};
    }
    return call(
        [&](kvq_error* e) { return ops_->copy_bandwidth(rt_, bytes, bytes_per_second, e); });
  }

 private:
  template <class F>
  Status call(F&& f) noexcept {
    kvq_error err{};
    if (f(&err) != KVQ_OK) return to_status(err);
    return Status::ok();
  }

  std::shared_ptr<const LoadedPlugin> plugin_;
  kvq_runtime* rt_;
  const kvq_runtime_ops* ops_;
};

}  // namespace

std::shared_ptr<KVCacheWriter> wrap_writer(std::shared_ptr<const LoadedPlugin> plugin,
                                           kvq_writer* writer, const PageLayout& layout) {
  return std::make_shared<PluginWriter>(std::move(plugin), writer, layout);
}

std::shared_ptr<KVCacheReader> wrap_reader(std::shared_ptr<const LoadedPlugin> plugin,
                                           kvq_reader* reader, const PageLayout& layout) {
  return std::make_shared<PluginReader>(std::move(plugin), reader, layout);
}

std::shared_ptr<KVCacheAttention> wrap_attention(std::shared_ptr<const LoadedPlugin> plugin,
                                                 kvq_attention* attention,
                                                 const PageLayout& layout) {
  return std::make_shared<PluginAttention>(std::move(plugin), attention, layout);
}

std::shared_ptr<DeviceRuntime> wrap_runtime(std::shared_ptr<const LoadedPlugin> plugin,
                                            kvq_runtime* runtime) {
  return std::make_shared<PluginRuntime>(std::move(plugin), runtime);
}

}  // namespace kvq::detail
