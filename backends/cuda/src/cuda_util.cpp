#include "cuda_util.h"

#include <fmt/format.h>

#include "kvq/core/logging.h"

namespace kvq::cuda {
namespace {

std::string error_text(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

}  // namespace

Status cuda_status(cudaError_t err, const std::string& what, int ordinal) {
  if (cudaPeekAtLastError() == err) (void)cudaGetLastError();
  const ErrorCode code = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                             ? ErrorCode::unavailable
                             : ErrorCode::runtime;
  return {code, fmt::format("{} on cuda:{} failed: {}", what, ordinal, error_text(err))};
}

DeviceGuard::DeviceGuard(int ordinal) : ordinal_(ordinal) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != ordinal) error_ = cudaSetDevice(ordinal);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != ordinal_) (void)cudaSetDevice(previous_);
}

std::string describe_device(const cudaDeviceProp& prop, int ordinal) {
  return fmt::format("{} (cuda:{}, compute capability {}.{}, {} SMs)", prop.name, ordinal,
                     prop.major, prop.minor, prop.multiProcessorCount);
}

StreamBook::Entry* StreamBook::find_or_add(void* stream) noexcept {
  for (Entry& e : entries_) {
    void* s = e.stream.load(std::memory_order_acquire);
    if (s == stream) return &e;
    if (s == nullptr) {
      // Claim it; another thread may have claimed it first, for this stream or another.
      if (e.stream.compare_exchange_strong(s, stream, std::memory_order_acq_rel) || s == stream) {
        return &e;
      }
    }
  }
  return nullptr;
}

PendingError take_pending_error() noexcept {
  PendingError p;
  p.error = cudaGetLastError();
  p.sticky = p.error != cudaSuccess && cudaPeekAtLastError() == p.error;
  return p;
}

Status launch_status(const char* what, int ordinal, const PendingError& pending, cudaError_t launch,
                     uint64_t blocks, unsigned threads, size_t desc_bytes) {
  if (pending.sticky) {
    return {ErrorCode::runtime,
            fmt::format("cuda {} not launched on cuda:{}: the CUDA context is unusable "
                        "after an earlier error, left over from earlier work (not this call's): {}",
                        what, ordinal, error_text(pending.error))};
  }
  if (launch != cudaSuccess) {
    std::string message = fmt::format(
        "cuda {} launch on cuda:{} (grid {} x {} threads{}) failed: {}", what, ordinal, blocks,
        threads, desc_bytes ? fmt::format(", {}-byte descriptor", desc_bytes) : "",
        error_text(launch));
    if (pending.error != cudaSuccess) {
      message += fmt::format(
          "; before the launch another error was pending, left over from earlier work and reset "
          "here: {}",
          error_text(pending.error));
    }
    return {ErrorCode::runtime, std::move(message)};
  }
  if (pending.error != cudaSuccess) {
    KVQ_LOG_WARN(
        "cuda {} on cuda:{}: reset a CUDA error left over from earlier work on this thread "
        "(not this call's, which launched fine): {}",
        what, ordinal, error_text(pending.error));
  }
  return Status::ok();
}

Status launch_programmatic(const char* what, const void* kernel, const void* desc,
                           size_t desc_bytes, unsigned blocks, unsigned threads,
                           cudaStream_t stream, int ordinal) noexcept {
  return launch_programmatic(what, kernel, desc, desc_bytes, dim3(blocks), threads, 0, stream,
                             ordinal);
}

Status launch_programmatic(const char* what, const void* kernel, const void* desc,
                           size_t desc_bytes, dim3 grid, unsigned threads, size_t shared_bytes,
                           cudaStream_t stream, int ordinal) noexcept {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return Status::ok();
  const PendingError pending = take_pending_error();
  cudaError_t err = pending.error;
  if (!pending.sticky) {
    void* args[] = {const_cast<void*>(desc)};
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &pdl;
    config.numAttrs = 1;
    err = cudaLaunchKernelExC(&config, kernel, args);
    // The runtime also keeps a failed launch's error as its last one; it is reported here, so
    // the next launch must not find it pending (as cuda_status does; a sticky one stays).
    if (err != cudaSuccess && cudaPeekAtLastError() == err) (void)cudaGetLastError();
  }
  if (err == cudaSuccess && pending.error == cudaSuccess) return Status::ok();  // the usual case
  try {
    return launch_status(what, ordinal, pending, err, uint64_t{grid.x} * grid.y * grid.z, threads,
                         desc_bytes);
  } catch (...) {  // formatting the message failed (out of memory)
    return {ErrorCode::runtime, "cuda kernel launch failed"};
  }
}

}  // namespace kvq::cuda
