// CudaDeviceRuntime: cudaMalloc'd memory, copies and fills on one non-blocking stream, and
// event-timed launches (direct or CUDA-graph replays) for `kvq bench`.
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda_device_runtime.h"
#include "cuda_util.h"
#include "kvq/core/median.h"

namespace kvq::cuda {
namespace {

// Evaluates `call`; on failure returns the Status naming `what` (only built on failure, so the
// timing loops pay nothing for it).
#define KVQ_CUDA_RETURN_IF_ERROR(call, what)                                           \
  do {                                                                                 \
    const cudaError_t kvq_cuda_err = (call);                                           \
    if (kvq_cuda_err != cudaSuccess) return cuda_status(kvq_cuda_err, what, ordinal_); \
  } while (0)

// Events created together and destroyed with the scope.
class EventPairs {
 public:
  ~EventPairs() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  cudaError_t create(std::size_t pairs) {
    events_.reserve(2 * pairs);
    for (std::size_t i = 0; i < 2 * pairs; ++i) {
      cudaEvent_t e = nullptr;
      if (cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) return err;
      events_.push_back(e);
    }
    return cudaSuccess;
  }
  cudaEvent_t start(std::size_t i) const { return events_[2 * i]; }
  cudaEvent_t stop(std::size_t i) const { return events_[2 * i + 1]; }
  // Appends each pair's elapsed milliseconds / `per` to *ms (after the stream has synchronized).
  cudaError_t elapsed(int per, std::vector<double>* ms) const {
    ms->reserve(ms->size() + events_.size() / 2);
    for (std::size_t i = 0; i < events_.size() / 2; ++i) {
      float t = 0;
      if (cudaError_t err = cudaEventElapsedTime(&t, start(i), stop(i)); err != cudaSuccess) {
        return err;
      }
      ms->push_back(static_cast<double>(t) / per);
    }
    return cudaSuccess;
  }

 private:
  std::vector<cudaEvent_t> events_;  // [start 0, stop 0, start 1, stop 1, ...]
};

// Instantiated graphs destroyed with the scope.
class GraphExecs {
 public:
  ~GraphExecs() {
    for (cudaGraphExec_t g : execs_) (void)cudaGraphExecDestroy(g);
  }
  void add(cudaGraphExec_t g) { execs_.push_back(g); }
  cudaGraphExec_t operator[](std::size_t i) const { return execs_[i]; }

 private:
  std::vector<cudaGraphExec_t> execs_;
};

// A device buffer freed with the scope.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr) (void)cudaFree(ptr);
  }
};

}  // namespace

Status CudaDeviceRuntime::create(int ordinal, CudaDeviceRuntime** out) noexcept {
  return catch_as_status([&] {
    *out = nullptr;
    int count = 0;
    if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(ErrorCode::unavailable,
                  std::string("no usable CUDA device: cudaGetDeviceCount: ") +
                      cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")");
    }
    if (ordinal < 0 || ordinal >= count) {
      throw Error(ErrorCode::unavailable, "cuda:" + std::to_string(ordinal) +
                                              " requested, but this machine has " +
                                              std::to_string(count) + " CUDA device(s)");
    }
    auto check = [&](cudaError_t err, const char* call) {
      if (err != cudaSuccess) throw Error(cuda_status(err, call, ordinal));
    };
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    DeviceGuard scope(ordinal);
    check(scope.error(), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    *out = new CudaDeviceRuntime(ordinal, describe_device(prop, ordinal), stream);
  });
}

CudaDeviceRuntime::~CudaDeviceRuntime() {
  DeviceGuard scope(ordinal_);
  (void)cudaStreamSynchronize(stream_);
  (void)cudaStreamDestroy(stream_);
}

Status CudaDeviceRuntime::allocate(std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  KVQ_CUDA_RETURN_IF_ERROR(cudaMalloc(out, bytes),
                           "cudaMalloc(" + std::to_string(bytes) + " bytes)");
  return Status::ok();
}

Status CudaDeviceRuntime::release(void* ptr) noexcept {
  if (!ptr) return Status::ok();
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  KVQ_CUDA_RETURN_IF_ERROR(cudaFree(ptr), "cudaFree");
  return Status::ok();
}

Status CudaDeviceRuntime::copy(void* dst, const void* src, std::size_t bytes,
                               CopyKind kind) noexcept {
  if (bytes == 0) return Status::ok();
  cudaMemcpyKind cuda_kind = cudaMemcpyDeviceToDevice;
  const char* name = "device-to-device";
  switch (kind) {
    case CopyKind::host_to_device:
      cuda_kind = cudaMemcpyHostToDevice;
      name = "host-to-device";
      break;
    case CopyKind::device_to_host:
      cuda_kind = cudaMemcpyDeviceToHost;
      name = "device-to-host";
      break;
    case CopyKind::device_to_device: break;
  }
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  KVQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cuda_kind, stream_),
      std::string("cudaMemcpyAsync(") + std::to_string(bytes) + " bytes, " + name + ")");
  // The host buffer may be reused (or read) as soon as we return.
  if (kind != CopyKind::device_to_device) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                             std::string("cudaStreamSynchronize after a ") + name + " copy");
  }
  return Status::ok();
}

Status CudaDeviceRuntime::fill(void* dst, uint8_t byte, std::size_t bytes) noexcept {
  if (bytes == 0) return Status::ok();
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  KVQ_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, byte, bytes, stream_),
                           "cudaMemsetAsync(" + std::to_string(bytes) + " bytes)");
  return Status::ok();
}

Status CudaDeviceRuntime::synchronize() noexcept {
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return Status::ok();
}

Status CudaDeviceRuntime::time(LaunchFn launch, void* context, const TimingOptions& options,
                               std::vector<double>* milliseconds) noexcept {
  milliseconds->clear();
  if (options.iterations < 1 || options.warmup < 0) {
    return {ErrorCode::invalid_argument,
            "timing: expected iterations >= 1 and warmup >= 0, got iterations " +
                std::to_string(options.iterations) + ", warmup " + std::to_string(options.warmup)};
  }
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  return options.graph ? time_graph(launch, context, options, milliseconds)
                       : time_direct(launch, context, options, milliseconds);
}

Status CudaDeviceRuntime::time_direct(LaunchFn launch, void* context, const TimingOptions& options,
                                      std::vector<double>* milliseconds) noexcept {
  const auto n = static_cast<std::size_t>(options.iterations);
  EventPairs events;
  KVQ_CUDA_RETURN_IF_ERROR(events.create(n), "cudaEventCreate");
  for (int i = 0; i < options.warmup; ++i) {
    if (Status s = launch(context, stream_); !s) return s;
  }
  for (std::size_t i = 0; i < n; ++i) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(i), stream_), "cudaEventRecord");
    if (Status s = launch(context, stream_); !s) return s;
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(i), stream_), "cudaEventRecord");
  }
  KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                           "cudaStreamSynchronize after the timed launches");
  KVQ_CUDA_RETURN_IF_ERROR(events.elapsed(1, milliseconds), "cudaEventElapsedTime");
  return Status::ok();
}

Status CudaDeviceRuntime::time_graph(LaunchFn launch, void* context, const TimingOptions& options,
                                     std::vector<double>* milliseconds) noexcept {
  const auto n = static_cast<std::size_t>(options.iterations);
  const int per_graph = options.launches_per_graph;
  if (per_graph < 1) {
    return {ErrorCode::invalid_argument,
            "graph timing: expected launches_per_graph >= 1, got " + std::to_string(per_graph)};
  }
  // Direct warm-up first: module loading and first-use allocations must not happen in a capture.
  for (int i = 0; i < options.warmup; ++i) {
    if (Status s = launch(context, stream_); !s) return s;
  }
  KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                           "cudaStreamSynchronize after the warm-up launches");

  // Graphs [0, w) are only for the warm-up replays; the timed replays start on graphs no replay
  // has touched, so each reads inputs that the context's rotation made cold.
  GraphExecs execs;
  const auto w = static_cast<std::size_t>(warmup_graphs(options));
  const std::size_t graphs = static_cast<std::size_t>(graphs_captured(options));
  for (std::size_t g = 0; g < graphs; ++g) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                             "cudaStreamBeginCapture");
    Status launched = Status::ok();
    for (int l = 0; l < per_graph && launched; ++l) launched = launch(context, stream_);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (!launched) {
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      return {launched.code(), "during CUDA graph capture: " + launched.message()};
    }
    KVQ_CUDA_RETURN_IF_ERROR(ended,
                             "cudaStreamEndCapture (the launch did something a CUDA graph cannot "
                             "hold, such as a synchronizing call)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    KVQ_CUDA_RETURN_IF_ERROR(instantiated, "cudaGraphInstantiate");
    execs.add(exec);
    KVQ_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, stream_), "cudaGraphUpload");
  }
  for (std::size_t g = 0; g < w; ++g) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(execs[g], stream_), "cudaGraphLaunch (warm-up)");
  }

  EventPairs events;
  KVQ_CUDA_RETURN_IF_ERROR(events.create(n), "cudaEventCreate");
  for (std::size_t i = 0; i < n; ++i) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(i), stream_), "cudaEventRecord");
    KVQ_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(execs[w + i % (graphs - w)], stream_),
                             "cudaGraphLaunch");
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(i), stream_), "cudaEventRecord");
  }
  KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                           "cudaStreamSynchronize after the timed graph replays");
  KVQ_CUDA_RETURN_IF_ERROR(events.elapsed(per_graph, milliseconds), "cudaEventElapsedTime");
  return Status::ok();
}

Status CudaDeviceRuntime::copy_bandwidth(std::size_t bytes, double* bytes_per_second) noexcept {
  *bytes_per_second = 0;
  if (bytes == 0) return {ErrorCode::invalid_argument, "copy bandwidth: expected bytes > 0"};
  DeviceGuard scope(ordinal_);
  KVQ_CUDA_RETURN_IF_ERROR(scope.error(), "cudaSetDevice");
  DeviceBuffer src, dst;
  KVQ_CUDA_RETURN_IF_ERROR(cudaMalloc(&src.ptr, bytes),
                           "cudaMalloc(" + std::to_string(bytes) + " bytes) for the copy source");
  KVQ_CUDA_RETURN_IF_ERROR(cudaMalloc(&dst.ptr, bytes),
                           "cudaMalloc(" + std::to_string(bytes) + " bytes) for the copy target");
  // Not zeros: a copy of zeros could be served faster than real data.
  KVQ_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(src.ptr, 0x5A, bytes, stream_), "cudaMemsetAsync");
  KVQ_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst.ptr, 0xA5, bytes, stream_), "cudaMemsetAsync");
  for (int i = 0; i < 2; ++i) {
    KVQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpyAsync (warm-up)");
  }
  const auto repeats = static_cast<std::size_t>(kCopyRepeats);
  EventPairs events;
  KVQ_CUDA_RETURN_IF_ERROR(events.create(repeats), "cudaEventCreate");
  for (std::size_t i = 0; i < repeats; ++i) {
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(i), stream_), "cudaEventRecord");
    KVQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes, device-to-device)");
    KVQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(i), stream_), "cudaEventRecord");
  }
  KVQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                           "cudaStreamSynchronize after the timed copies");
  std::vector<double> ms;
  KVQ_CUDA_RETURN_IF_ERROR(events.elapsed(1, &ms), "cudaEventElapsedTime");
  const double median_ms = median(ms);
  if (median_ms <= 0) {
    return {ErrorCode::runtime, "copy bandwidth: the timed copies of " + std::to_string(bytes) +
                                    " bytes took no measurable time"};
  }
  *bytes_per_second = 2.0 * static_cast<double>(bytes) / (median_ms * 1e-3);
  return Status::ok();
}

#undef KVQ_CUDA_RETURN_IF_ERROR

}  // namespace kvq::cuda

namespace kvq {

Status make_cuda_device_runtime(const BackendOptions& options, DeviceRuntime** out) noexcept {
  *out = nullptr;
  const Device device = options.device.value_or(Device::cuda(0));
  if (!device.is_cuda()) {
    return {ErrorCode::invalid_argument,
            "cuda runtime: device " + to_string(device) +
                " requested; this backend works on CUDA devices only (cuda:N)",
            "device"};
  }
  cuda::CudaDeviceRuntime* runtime = nullptr;
  Status s = cuda::CudaDeviceRuntime::create(device.index, &runtime);
  *out = runtime;
  return s;
}

}  // namespace kvq
