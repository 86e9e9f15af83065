#include "cuda_writer.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>

#include "cuda_util.h"
#include "element_kernels.h"
#include "kvq/core/contract.h"
#include "kvq/core/logging.h"
#include "kvq/core/scale_rule.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "write_kernel.h"
#include "write_plan.h"

namespace kvq::cuda {
namespace {

Status invalid(std::string message) {
  return {ErrorCode::invalid_argument, std::move(message)};
}

// Whether `stream` is being captured (cudaStreamIsCapturing: the capture-safe question).
Status stream_capturing(cudaStream_t stream, int ordinal, bool* capturing) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t err = cudaStreamIsCapturing(stream, &capture); err != cudaSuccess) {
    return cuda_status(err, "cudaStreamIsCapturing", ordinal);
  }
  *capturing = capture != cudaStreamCaptureStatusNone;
  return Status::ok();
}

// The stream must belong to the writer's device, `ordinal`, current now (a kernel launched into
// another device's stream fails). Asks CUDA once per stream and only outside a capture;
// `capturing` < 0: not known yet (asked here when needed). `*entry`: the stream's book entry
// (the legacy default stream's is booked as cudaStreamLegacy); nullptr for the per-thread
// default stream and when the book is full.
Status check_stream(StreamBook& book, cudaStream_t stream, int capturing, int ordinal,
                    StreamBook::Entry** entry) {
  *entry = nullptr;
  if (stream == cudaStreamPerThread) return Status::ok();  // the current device's
  void* key = stream == nullptr ? static_cast<void*>(cudaStreamLegacy) : stream;
  StreamBook::Entry* e = book.find_or_add(key);
  *entry = e;
  if (is_special_stream(stream)) return Status::ok();
  if (e != nullptr && e->on_device.load(std::memory_order_acquire)) return Status::ok();
  if (capturing < 0) {
    bool c = false;
    if (Status st = stream_capturing(stream, ordinal, &c); !st) return st;
    capturing = c ? 1 : 0;
  }
  if (capturing > 0) return Status::ok();  // cudaStreamGetDevice would break the capture
#if CUDART_VERSION >= 12080
  int dev = -1;
  if (cudaError_t err = cudaStreamGetDevice(stream, &dev); err != cudaSuccess) {
    return cuda_status(err, "cudaStreamGetDevice", ordinal);
  }
  if (dev != ordinal) {
    return invalid(
        fmt::format("stream belongs to cuda:{}: expected a stream of cuda:{} (the writer's device)",
                    dev, ordinal));
  }
#endif
  if (e != nullptr) e->on_device.store(true, std::memory_order_release);
  return Status::ok();
}

// Opens the device and the layout shared by writer and reader: nvfp4 addressing, or for a
// per-element format (*element = true) its page in chunks of `chunk_elems`.
void open_common(const PageLayout& page, const std::optional<Device>& device, uint32_t chunk_elems,
                 DeviceInfo* info, std::unique_ptr<PageLayout>* layout, bool* element,
                 PageAddressing* addressing, ElementPage* element_page) {
  int ordinal = 0;
  *element = is_element_format(page.descriptor().format);
  if (*element) {
    throw_if_error(make_element_page(page.descriptor(), chunk_elems, element_page));
  } else {
    throw_if_error(make_page_addressing(page.descriptor(), addressing));
  }
  throw_if_error(resolve_device(device, &ordinal));
  throw_if_error(open_device(ordinal, info));
  *layout = std::make_unique<PageLayout>(page);
}

}  // namespace

Status resolve_device(const std::optional<Device>& device, int* ordinal) {
  const Device d = device.value_or(Device::cuda(0));
  if (!d.is_cuda()) {
    return {ErrorCode::invalid_argument,
            fmt::format("cuda works on CUDA device memory: expected device cuda:N, found {}",
                        to_string(d)),
            "device"};
  }
  *ordinal = d.index;
  return Status::ok();
}

// ---- writer -------------------------------------------------------------------------------------

Status CudaWriter::create(const BackendOptions& options, KVCacheWriter** out) noexcept {
  return catch_as_status([&] {
    CudaWriter* w = nullptr;
    throw_if_error(create(PageLayout::from_spec(options.cache), options.device, &w));
    *out = w;
  });
}

Status CudaWriter::create(const PageLayout& layout, const std::optional<Device>& device,
                          CudaWriter** out) noexcept {
  return catch_as_status([&] {
    std::unique_ptr<CudaWriter> w(new CudaWriter());
    open_common(layout, device, chunk_elements(layout.descriptor().format), &w->info_, &w->layout_,
                &w->element_, &w->addressing_, &w->element_page_);
    w->needs_ = write_requirements(w->info_.ordinal);
    DeviceGuard guard(w->info_.ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", w->info_.ordinal));
    }
    void* counters = nullptr;
    if (cudaError_t err = cudaMalloc(&counters, sizeof(WriteCounters)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMalloc (write counters)", w->info_.ordinal));
    }
    w->counters_ = static_cast<WriteCounters*>(counters);
    if (auto err = static_cast<cudaError_t>(
            w->element_
                ? preload_element_write_kernels(layout.descriptor().format, w->info_.num_sms,
                                                &w->element_bars_)
                : preload_write_kernels(w->info_.use_hw_e2m1, w->info_.num_sms, &w->size_bars_));
        err != cudaSuccess) {
      throw Error(
          cuda_status(err, "cudaFuncGetAttributes (loading the write kernels)", w->info_.ordinal));
    }
    if (cudaError_t err = cudaMemset(counters, 0, sizeof(WriteCounters)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemset (write counters)", w->info_.ordinal));
    }
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaDeviceSynchronize", w->info_.ordinal));
    }
    KVQ_LOG_DEBUG("cuda writer on {}: {}", w->info_.description, w->info_.e2m1_detail);
    *out = w.release();
  });
}

CudaWriter::~CudaWriter() {
  if (counters_ != nullptr) {
    DeviceGuard guard(info_.ordinal);
    (void)cudaFree(counters_);
  }
}

// The hot path (decode writes every step): no allocation, no lock, no exception, no formatting
// unless something is refused; CUDA calls: cudaGetDevice, cudaStreamIsCapturing, 2 x
// cudaGetLastError and the launch (plus cudaStreamGetDevice on a stream's first direct write).
Status CudaWriter::write(const WriteArgs& args) noexcept {
  if (Status st = check_write_args(args, *layout_, requirements(), "cuda"); !st) return st;
  return write_checked(args);
}

Status CudaWriter::write_checked(const WriteArgs& args) noexcept {
  try {
    WriteKernelDesc desc;
    ElementWriteDesc element_desc;
    InputType input;
    uint32_t items = 0;
    if (element_) {
      if (Status st = plan_element_write(args, layout_->descriptor(), element_page_, element_bars_,
                                         &element_desc, &input);
          !st) {
        return st;
      }
      items = element_desc.page.items;
      element_desc.counters = counters_;
    } else {
      if (Status st =
              plan_write(args, layout_->descriptor(), addressing_, size_bars_, &desc, &input);
          !st) {
        return st;
      }
      items = desc.page.items;
      desc.counters = counters_;
      desc.use_hw_e2m1 = info_.use_hw_e2m1 ? 1 : 0;
    }
    if (items == 0) return Status::ok();
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) return cuda_status(guard.error(), "cudaSetDevice", ordinal);
    auto stream = static_cast<cudaStream_t>(args.stream);
    bool capturing = false;
    if (Status st = stream_capturing(stream, ordinal, &capturing); !st) return st;
    StreamBook::Entry* entry = nullptr;
    if (Status st = check_stream(streams_, stream, capturing ? 1 : 0, ordinal, &entry); !st) {
      return st;
    }
    if (Status st =
            element_ ? launch_element_write(element_desc, input,
                                            element_write_launch_shape(element_desc, info_.num_sms),
                                            stream, ordinal)
                     : launch_write(desc, input, write_launch_shape(desc, info_.num_sms), stream,
                                    ordinal);
        !st) {
      return st;
    }
    if (capturing) {
      // Replays may run on any stream, at any time, without calling write(): every later take
      // waits for the whole device.
      captured_.store(true, std::memory_order_release);
    } else if (entry == nullptr) {
      // A stream the book cannot hold cannot be named later.
      sync_device_.store(true, std::memory_order_release);
    } else {
      entry->used.store(true, std::memory_order_release);
    }
    return Status::ok();
  } catch (...) {
    return catch_as_status([] { throw; });
  }
}

Status CudaWriter::take_out_of_range_slots(int64_t* count) noexcept {
  if (count == nullptr) return {ErrorCode::invalid_argument, "count: null pointer"};
  return catch_as_status([&] {
    std::lock_guard<std::mutex> lock(take_mutex_);
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess)
      throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
    // Flags are taken before the waits: a write issued meanwhile marks its stream again.
    const bool whole_device = sync_device_.exchange(false, std::memory_order_acq_rel) ||
                              captured_.load(std::memory_order_acquire);
    cudaError_t err = cudaSuccess;
    const char* what = "cudaStreamSynchronize (writes so far)";
    streams_.take_used([&](void* s) {
      if (!whole_device && err == cudaSuccess)
        err = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    });
    if (whole_device && err == cudaSuccess) {
      err = cudaDeviceSynchronize();
      what = "cudaDeviceSynchronize (writes so far)";
    }
    if (err != cudaSuccess) {
      sync_device_.store(true, std::memory_order_release);  // the next take waits for everything
      throw Error(cuda_status(err, what, ordinal));
    }
    // The counters only grow; a take reports what they grew by since the last one. (Zeroing them
    // here would race with a write another thread issues between the read and the reset, and lose
    // that write's count.)
    WriteCounters now{};
    if (err = cudaMemcpy(&now, counters_, sizeof now, cudaMemcpyDeviceToHost); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemcpy (write counters)", ordinal));
    }
    *count = static_cast<int64_t>(now.out_of_range_slots - taken_.out_of_range_slots);
    const unsigned long long refused = now.unusable_scale_tokens - taken_.unusable_scale_tokens;
    taken_ = now;
    if (refused != 0) {
      // (head + 1) << 33 | side << 32 | bits; head + 1 = 0 for a per-tensor scale.
      const auto side = static_cast<unsigned>((now.last_unusable_scale >> 32) & 1u);
      const auto head = now.last_unusable_scale >> kUnusableScaleHeadShift;
      const auto bits = static_cast<uint32_t>(now.last_unusable_scale);
      float scale;
      std::memcpy(&scale, &bits, sizeof scale);
      const std::string name =
          head == 0 ? std::string(side == 0 ? "*k_scale_ptr" : "*v_scale_ptr")
                    : fmt::format("{}_head_scales[{}]", side == 0 ? "k" : "v", head - 1);
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("{} token(s) since the last take were not written: their write's device "
                      "scale broke the rule (the last: {})",
                      refused, scale_refusal(name, scale)));
    }
  });
}

// ---- reader -------------------------------------------------------------------------------------

Status CudaReader::create(const BackendOptions& options, KVCacheReader** out) noexcept {
  return catch_as_status([&] {
    CudaReader* r = nullptr;
    throw_if_error(create(PageLayout::from_spec(options.cache), options.device, &r));
    *out = r;
  });
}

Status CudaReader::create(const PageLayout& layout, const std::optional<Device>& device,
                          CudaReader** out) noexcept {
  return catch_as_status([&] {
    std::unique_ptr<CudaReader> r(new CudaReader());
    open_common(layout, device, kReadChunkElements, &r->info_, &r->layout_, &r->element_,
                &r->addressing_, &r->element_page_);
    r->needs_ = read_requirements(r->info_.ordinal);
    DeviceGuard guard(r->info_.ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", r->info_.ordinal));
    }
    if (auto err = static_cast<cudaError_t>(
            r->element_ ? preload_element_read_kernel(layout.descriptor().format)
                        : preload_read_kernel());
        err != cudaSuccess) {
      throw Error(
          cuda_status(err, "cudaFuncGetAttributes (loading the read kernel)", r->info_.ordinal));
    }
    *out = r.release();
  });
}

Status CudaReader::read(const ReadArgs& args) noexcept {
  if (Status st = check_read_args(args, *layout_, requirements(), "cuda"); !st) return st;
  return read_checked(args);
}

Status CudaReader::read_checked(const ReadArgs& args) noexcept {
  try {
    ReadKernelDesc desc;
    ElementReadDesc element_desc;
    uint32_t items = 0;
    if (element_) {
      if (Status st = plan_element_read(args, layout_->descriptor(), element_page_, &element_desc);
          !st) {
        return st;
      }
      items = element_desc.page.items;
    } else {
      if (Status st = plan_read(args, layout_->descriptor(), addressing_, &desc); !st) {
        return st;
      }
      items = desc.page.items;
    }
    if (items == 0) return Status::ok();
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) return cuda_status(guard.error(), "cudaSetDevice", ordinal);
    auto stream = static_cast<cudaStream_t>(args.stream);
    StreamBook::Entry* entry = nullptr;
    if (Status st = check_stream(streams_, stream, -1, ordinal, &entry); !st) return st;
    if (element_) {
      return launch_element_read(element_desc, element_read_launch_shape(items), stream, ordinal);
    }
    return launch_read(desc, read_launch_shape(items), stream, ordinal);
  } catch (...) {
    return catch_as_status([] { throw; });
  }
}

}  // namespace kvq::cuda
