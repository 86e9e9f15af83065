#include "cuda_writer.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda_util.h"
#include "kvq/core/logging.h"
#include "write_kernel.h"
#include "write_plan.h"

namespace kvq::cuda_nvfp4 {
namespace {

Status invalid(std::string message) {
  return {ErrorCode::invalid_argument, std::move(message)};
}

// Layout errors name the config key (Error::key) in the message too: it is lost across the
// plugin boundary otherwise.
std::unique_ptr<Nvfp4PageLayout> make_layout(const CacheSpec& spec) {
  try {
    return std::make_unique<Nvfp4PageLayout>(spec);
  } catch (const Error& e) {
    if (e.key().empty()) throw;
    throw Error(e.code(), e.key() + ": " + e.what(), e.key());
  }
}

// The stream must belong to the writer's device (a kernel launched on another device's stream
// fails, or worse, runs there with this device's pointers).
void check_stream_device(cudaStream_t stream, int ordinal) {
#if CUDART_VERSION >= 12080
  if (stream == nullptr) return;
  int dev = -1;
  const cudaError_t err = cudaStreamGetDevice(stream, &dev);
  if (err != cudaSuccess) throw Error(cuda_status(err, "cudaStreamGetDevice", ordinal));
  if (dev != ordinal) {
    throw Error(
        invalid(fmt::format("stream belongs to cuda:{}: expected a stream of cuda:{} (the "
                            "writer's device)",
                            dev, ordinal)));
  }
#else
  (void)stream;
  (void)ordinal;
#endif
}

// Opens the device and the layout shared by writer and reader.
void open_common(const BackendOptions& options, DeviceInfo* info,
                 std::unique_ptr<Nvfp4PageLayout>* layout, PageAddressing* addressing) {
  int ordinal = 0;
  throw_if_error(resolve_device(options, &ordinal));
  throw_if_error(open_device(ordinal, info));
  *layout = make_layout(options.cache);
  throw_if_error(make_page_addressing((*layout)->descriptor(), addressing));
}

}  // namespace

Status resolve_device(const BackendOptions& options, int* ordinal) {
  const Device d = options.device.value_or(Device::cuda(0));
  if (!d.is_cuda()) {
    return invalid(
        fmt::format("cuda_nvfp4 works on CUDA device memory: expected device cuda:N, "
                    "found {}",
                    to_string(d)));
  }
  *ordinal = d.index;
  return Status::ok();
}

// ---- writer -------------------------------------------------------------------------------------

Status CudaNvfp4Writer::create(const BackendOptions& options, KVCacheWriter** out) noexcept {
  return catch_as_status([&] {
    std::unique_ptr<CudaNvfp4Writer> w(new CudaNvfp4Writer());
    open_common(options, &w->info_, &w->layout_, &w->addressing_);
    w->streams_.reserve(kMaxStreams);
    DeviceGuard guard(w->info_.ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", w->info_.ordinal));
    }
    void* counter = nullptr;
    if (cudaError_t err = cudaMalloc(&counter, sizeof(unsigned long long)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMalloc (out-of-range slot counter)", w->info_.ordinal));
    }
    w->counter_ = static_cast<unsigned long long*>(counter);
    if (cudaError_t err = cudaMemset(counter, 0, sizeof(unsigned long long)); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemset (out-of-range slot counter)", w->info_.ordinal));
    }
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaDeviceSynchronize", w->info_.ordinal));
    }
    KVQ_LOG_DEBUG("cuda_nvfp4 writer on {}: {}", w->info_.description, w->info_.e2m1_detail);
    *out = w.release();
  });
}

CudaNvfp4Writer::~CudaNvfp4Writer() {
  if (counter_ != nullptr) {
    DeviceGuard guard(info_.ordinal);
    (void)cudaFree(counter_);
  }
}

void CudaNvfp4Writer::remember_stream(void* stream) {
  for (void* s : streams_) {
    if (s == stream) return;
  }
  if (streams_.size() < kMaxStreams) {
    streams_.push_back(stream);
  } else {
    sync_device_ = true;
  }
}

Status CudaNvfp4Writer::write(const WriteArgs& args) noexcept {
  return catch_as_status([&] {
    WriteKernelDesc desc;
    InputType input;
    throw_if_error(plan_write(args, layout_->descriptor(), addressing_, device(), &desc, &input));
    desc.out_of_range = counter_;
    desc.use_hw_e2m1 = info_.use_hw_e2m1 ? 1 : 0;
    if (desc.page.items == 0) return;
    DeviceGuard guard(info_.ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", info_.ordinal));
    }
    auto stream = static_cast<cudaStream_t>(args.stream);
    check_stream_device(stream, info_.ordinal);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaError_t err = cudaStreamIsCapturing(stream, &capture); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaStreamIsCapturing", info_.ordinal));
    }
    throw_if_error(launch_write(desc, input, launch_shape(desc.page.items, info_.num_sms), stream));
    std::lock_guard<std::mutex> lock(mutex_);
    if (capture != cudaStreamCaptureStatusNone) {
      sync_device_ = true;  // replays may run on any stream: take() must wait for all of them
    } else {
      remember_stream(stream);
    }
  });
}

Status CudaNvfp4Writer::take_out_of_range_slots(int64_t* count) noexcept {
  return catch_as_status([&] {
    std::lock_guard<std::mutex> lock(mutex_);
    const int ordinal = info_.ordinal;
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess)
      throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
    if (sync_device_) {
      if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
        throw Error(cuda_status(err, "cudaDeviceSynchronize (writes so far)", ordinal));
      }
    } else {
      for (void* s : streams_) {
        if (cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
            err != cudaSuccess) {
          throw Error(cuda_status(err, "cudaStreamSynchronize (writes so far)", ordinal));
        }
      }
    }
    unsigned long long value = 0;
    if (cudaError_t err = cudaMemcpy(&value, counter_, sizeof value, cudaMemcpyDeviceToHost);
        err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemcpy (out-of-range slot counter)", ordinal));
    }
    if (cudaError_t err = cudaMemset(counter_, 0, sizeof value); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaMemset (out-of-range slot counter)", ordinal));
    }
    if (cudaError_t err = cudaStreamSynchronize(nullptr); err != cudaSuccess) {
      throw Error(cuda_status(err, "cudaStreamSynchronize (counter reset)", ordinal));
    }
    streams_.clear();
    sync_device_ = false;
    *count = static_cast<int64_t>(value);
  });
}

// ---- reader -------------------------------------------------------------------------------------

Status CudaNvfp4Reader::create(const BackendOptions& options, KVCacheReader** out) noexcept {
  return catch_as_status([&] {
    std::unique_ptr<CudaNvfp4Reader> r(new CudaNvfp4Reader());
    open_common(options, &r->info_, &r->layout_, &r->addressing_);
    *out = r.release();
  });
}

Status CudaNvfp4Reader::read(const ReadArgs& args) noexcept {
  return catch_as_status([&] {
    ReadKernelDesc desc;
    throw_if_error(plan_read(args, layout_->descriptor(), addressing_, device(), &desc));
    if (desc.page.items == 0) return;
    DeviceGuard guard(info_.ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", info_.ordinal));
    }
    auto stream = static_cast<cudaStream_t>(args.stream);
    check_stream_device(stream, info_.ordinal);
    throw_if_error(launch_read(desc, launch_shape(desc.page.items, info_.num_sms), stream));
  });
}

}  // namespace kvq::cuda_nvfp4
