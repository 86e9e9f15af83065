#pragma once
// Shared by the cuda GPU tests: skipping without a device, device buffers, random write
// cases, and the host reference that every page byte is compared with (nvfp4_quantize_group at
// the descriptor's offsets: the format's definition in code, also cross-checked against the
// reference_cpu writer).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_writer.h"
#include "kvq/core/cache_spec.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"
#include "require_gpu.h"

namespace kvq::cuda::test {

// "" when a CUDA device is usable, else "no CUDA device: <reason>".
std::string cuda_device_missing();

// First in every GPU test: skips it where there is no usable CUDA device, or fails it there when
// KVQ_REQUIRE_GPU is set (require_gpu.h: the GPU scripts set it, so a broken driver cannot pass
// as a run of skips).
#define KVQ_REQUIRE_CUDA_DEVICE()                                             \
  do {                                                                        \
    const std::string kvq_missing = ::kvq::cuda::test::cuda_device_missing(); \
    if (!kvq_missing.empty()) KVQ_NO_CUDA_DEVICE(kvq_missing);                \
  } while (0)

// Fails the test (ASSERT) on a CUDA error; the message names the call.
void check_cuda(int err, const char* what);

// A non-blocking stream, destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// What `body` enqueues on `stream`, captured into a graph (in `mode`) and instantiated. The
// capture is always ended, also when body fails, so a failing test never leaves its stream
// capturing for the next one; exec() is null, with a test failure naming the CUDA error (and the
// runtime's last error reset), when the capture was invalidated or did not instantiate.
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& body,
                cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

const char* capture_mode_name(cudaStreamCaptureMode mode);

// cudaMalloc'd bytes, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  template <class T>
  void upload(const std::vector<T>& v) {
    upload(v.data(), v.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> download_all() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Element bits of bf16/f16 <-> float, exact (no rounding: values are generated representable).
float bf16_to_float(uint16_t b);
float f16_to_float(uint16_t h);
uint16_t float_to_bf16_exact(float f);  // f must be representable (low 16 bits zero)
uint16_t float_to_f16_exact(float f);   // f must be representable in f16

// One write: inputs in host memory laid out exactly as on the device (strides in elements).
struct WriteCase {
  CacheSpec spec;
  DType dtype = DType::bf16;
  DType slot_dtype = DType::i64;
  int64_t tokens = 0;
  bool fused_qkv = false;  // key/value are views into one [T, (2H + 2H) * D] qkv buffer
  int64_t token_stride = 0, head_stride = 0;  // elements, both tensors
  int64_t key_offset = 0, value_offset = 0;   // elements into `input`
  std::vector<uint8_t> input;                 // raw element bytes (all of qkv when fused)
  std::vector<int64_t> slots;                 // as int64 (narrowed to i32 on upload if asked)
  float k_scale = 1.0f, v_scale = 1.0f;
  bool device_scales = false;  // pass k/v scale by device pointer

  // Element (t, h, d) of side s (0 = key, 1 = value) as float.
  float element(int side, int64_t t, int64_t h, int64_t d) const;
  void set_element(int side, int64_t t, int64_t h, int64_t d, float v);
  // Raw element bits (the low 16 for bf16/f16): NaN payloads, subnormals, any pattern.
  void set_bits(int side, int64_t t, int64_t h, int64_t d, uint32_t bits);
  std::string describe() const;
};

// Allocates input of the case's shape (zeros), with strides for contiguous or fused-QKV input.
void shape_case(WriteCase& c);

// A fixed geometry for random_case (instead of a random one).
struct CaseShape {
  int64_t num_kv_heads, head_size, block_size, tokens;
};

// Random case: geometry from the lists in the issue (or `shape`), inputs gaussian with per-group
// magnitudes spanning 1e-3..1e3, distinct random slots with ~10% padding (-1).
WriteCase random_case(std::mt19937_64& rng, int index, const CaseShape* shape = nullptr);

// The definition: cache bytes after writing `c` into `cache` (host), skipping slots < 0 and
// >= num_slots.
void reference_write(const WriteCase& c, std::vector<uint8_t>& cache);

// The same through reference_cpu's ReferenceWriter (the backend every other is compared with);
// out-of-range slots must not be present.
void reference_cpu_write(const WriteCase& c, std::vector<uint8_t>& cache);

// Device copies of a case's tensors and the WriteArgs pointing at them. The cache lies between
// two guard bands of random bytes in one allocation, so a write that lands outside the cache
// shows (compare_cache on a DeviceCase checks them):
//   [guard, guard_bytes + cache_offset | cache, initial_cache.size() | guard, guard_bytes]
// guard_bytes is a multiple of 256 (cudaMalloc's alignment) of at least a page and 4 KiB: the
// cache pointer is as aligned as cudaMalloc's with cache_offset 0, and cache_offset bytes past
// that otherwise (a misaligned cache pointer when not a multiple of 16); slot -1 or num_slots
// taken as a page would land in the guards.
struct DeviceCase {
  DeviceBuffer input, slots, scales;
  DeviceBuffer guarded_cache;  // guards and cache: use the functions below, not its bytes
  size_t cache_offset = 0, cache_bytes = 0, guard_bytes = 0, page_bytes = 0;
  std::vector<uint8_t> front_guard, back_guard;  // what the guards hold (front: + cache_offset)
  WriteArgs args;

  // The cache's bytes as the write left them (without the guards).
  std::vector<uint8_t> download_cache() const;
  // Replaces the cache's bytes (the guards are left as they are: a change stays visible).
  void upload_cache(const std::vector<uint8_t>& bytes);
  // "" when both guards hold their bytes, else which changed: how many bytes, and where the first
  // is relative to the cache (page -1 is the page before it, page num_blocks the one after).
  std::string guards_changed() const;
};
DeviceCase upload_case(const WriteCase& c, const std::vector<uint8_t>& initial_cache,
                       size_t cache_offset = 0);

// Random bytes: what the cache holds before a write, so unwritten bytes are visible.
std::vector<uint8_t> poison(size_t bytes, uint64_t seed);

// "" when equal, else the first differing byte explained (page, region, offset, both values)
// and the number of differing bytes.
std::string compare_cache(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                          const kvq_page_desc& layout);
// The same for the device cache of `d` (downloaded), which also fails when a byte of either guard
// band changed: "" only when the cache equals `want` and nothing landed outside it.
std::string compare_cache(const DeviceCase& d, const std::vector<uint8_t>& want,
                          const kvq_page_desc& layout);

// The check most GPU tests make: `c` written by a fresh cuda writer into a cache of
// poison(seed) bytes whose pointer is `cache_offset` (0..8) bytes past an aligned one
// (upload_case), so narrowly aligned caches are covered. "" when every cache byte equals
// reference_write's and the writer counted exactly the case's out-of-range tokens, and neither
// guard band around the cache changed, else what went wrong (compare_cache's words).
std::string write_differs_from_reference(const WriteCase& c, uint64_t seed,
                                         size_t cache_offset = 0);

// A writer for `spec` on cuda:0 (the test fails when it cannot be made).
std::unique_ptr<KVCacheWriter> make_writer(const CacheSpec& spec);
std::unique_ptr<KVCacheReader> make_reader(const CacheSpec& spec);

}  // namespace kvq::cuda::test
