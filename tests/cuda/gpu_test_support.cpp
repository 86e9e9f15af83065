#include "gpu_test_support.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "guard_bands.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/reference_cpu/reference_writer.h"
#include "probe.h"

namespace kvq::cuda::test {

std::string cuda_device_missing() {
  int count = 0;
  const Status s = cuda_device_count(&count);  // the probe's wording
  return s.is_ok() ? std::string() : s.message();
}

void check_cuda(int err, const char* what) {
  const auto e = static_cast<cudaError_t>(err);
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e) << " (" << cudaGetErrorName(e)
                            << ")";
}

namespace {

// After every test: a CUDA error still pending (a failed call whose error nobody took) is named
// with the test that left it and reset, so it is not picked up by the next test's launch check.
// (A sticky error cannot be reset: every later test fails, and this names the first.)
class PendingErrorListener : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    static const bool have_device = cuda_device_missing().empty();
    if (!have_device) return;
    const cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) return;
    std::printf("[ CUDA     ] %s.%s left a CUDA error pending: %s (%s); reset here%s\n",
                info.test_suite_name(), info.name(), cudaGetErrorString(err), cudaGetErrorName(err),
                cudaPeekAtLastError() == err ? " (it is sticky: later tests will fail)" : "");
  }
};

const bool kListenerInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new PendingErrorListener);
  return true;
}();

}  // namespace

Stream::Stream() {
  check_cuda(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
}

Stream::~Stream() {
  if (s_ != nullptr) (void)cudaStreamDestroy(s_);
}

const char* capture_mode_name(cudaStreamCaptureMode mode) {
  switch (mode) {
    case cudaStreamCaptureModeGlobal: return "global";
    case cudaStreamCaptureModeThreadLocal: return "thread-local";
    case cudaStreamCaptureModeRelaxed: return "relaxed";
  }
  return "?";
}

CapturedGraph::CapturedGraph(cudaStream_t stream, const std::function<void()>& body,
                             cudaStreamCaptureMode mode) {
  const cudaError_t begin = cudaStreamBeginCapture(stream, mode);
  if (begin != cudaSuccess) {
    (void)cudaGetLastError();
    ADD_FAILURE() << "cudaStreamBeginCapture (" << capture_mode_name(mode)
                  << "): " << cudaGetErrorName(begin);
    return;
  }
  body();
  const cudaError_t end = cudaStreamEndCapture(stream, &graph_);  // always, whatever body did
  if (end != cudaSuccess || graph_ == nullptr) {
    (void)cudaGetLastError();
    ADD_FAILURE() << "cudaStreamEndCapture (" << capture_mode_name(mode)
                  << "): " << cudaGetErrorString(end) << " (" << cudaGetErrorName(end)
                  << "): something in the capture broke it";
    return;
  }
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    exec_ = nullptr;
    ADD_FAILURE() << "cudaGraphInstantiate: " << cudaGetErrorString(inst) << " ("
                  << cudaGetErrorName(inst) << ")";
  }
}

CapturedGraph::~CapturedGraph() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  ASSERT_LE(offset + bytes, bytes_);
  check_cuda(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice),
             "cudaMemcpy H2D");
  // From pageable memory cudaMemcpy may return before the DMA has landed, and the legacy stream
  // does not order work on the non-blocking streams tests write on: wait for the bytes.
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after H2D");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  ASSERT_LE(offset + bytes, bytes_);
  check_cuda(
      cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
      "cudaMemcpy D2H");
}

// ---- element conversions ------------------------------------------------------------------------

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float bf16_to_float(uint16_t b) {
  return from_bits(static_cast<uint32_t>(b) << 16);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return from_bits(sign | 0x7F800000u | (man << 13));   // inf / NaN
  if (exp == 0) {                                                        // zero / subnormal
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;  // 2^-24, exact
    return from_bits(sign | bits_of(mag));
  }
  return from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t float_to_bf16_exact(float f) {
  return static_cast<uint16_t>(bits_of(f) >> 16);
}

uint16_t float_to_f16_exact(float f) {
  const uint32_t u = bits_of(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (mag == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (mag == 0) return sign;
  const int exp = static_cast<int>(mag >> 23) - 127;
  if (exp < -14) {  // subnormal: value = man * 2^-24
    const float m = from_bits(mag) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | ((mag >> 13) & 0x3FFu));
}

// ---- cases
// ---------------------------------------------------------------------------------------

float WriteCase::element(int side, int64_t t, int64_t h, int64_t d) const {
  const int64_t e =
      (side == 0 ? key_offset : value_offset) + t * token_stride + h * head_stride + d;
  switch (dtype) {
    case DType::bf16: {
      uint16_t b;
      std::memcpy(&b, input.data() + e * 2, 2);
      return bf16_to_float(b);
    }
    case DType::f16: {
      uint16_t b;
      std::memcpy(&b, input.data() + e * 2, 2);
      return f16_to_float(b);
    }
    default: {
      float f;
      std::memcpy(&f, input.data() + e * 4, 4);
      return f;
    }
  }
}

void WriteCase::set_element(int side, int64_t t, int64_t h, int64_t d, float v) {
  const int64_t e =
      (side == 0 ? key_offset : value_offset) + t * token_stride + h * head_stride + d;
  switch (dtype) {
    case DType::bf16: {
      const uint16_t b = float_to_bf16_exact(v);
      std::memcpy(input.data() + e * 2, &b, 2);
      break;
    }
    case DType::f16: {
      const uint16_t b = float_to_f16_exact(v);
      std::memcpy(input.data() + e * 2, &b, 2);
      break;
    }
    default: std::memcpy(input.data() + e * 4, &v, 4);
  }
}

void WriteCase::set_bits(int side, int64_t t, int64_t h, int64_t d, uint32_t bits) {
  const int64_t e =
      (side == 0 ? key_offset : value_offset) + t * token_stride + h * head_stride + d;
  if (dtype == DType::f32) {
    std::memcpy(input.data() + e * 4, &bits, 4);
  } else {
    const auto b = static_cast<uint16_t>(bits);
    std::memcpy(input.data() + e * 2, &b, 2);
  }
}

std::string WriteCase::describe() const {
  return fmt::format(
      "T={} H={} D={} block_size={} num_blocks={} {} K {} V {} {} {} slots {} k_scale={} "
      "v_scale={}{}",
      tokens, spec.num_kv_heads, spec.head_size, spec.block_size, spec.num_blocks,
      spec.layout.order, spec.layout.k_scales, spec.layout.v_scales, dtype_name(dtype),
      fused_qkv ? "fused-qkv view" : "contiguous", dtype_name(slot_dtype), k_scale, v_scale,
      device_scales ? " (device pointers)" : "");
}

void shape_case(WriteCase& c) {
  const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size;
  const int64_t esize = dtype_size(c.dtype);
  c.head_stride = D;
  if (c.fused_qkv) {
    // qkv [T, (Hq + 2H) * D] with Hq = 2H: key after the queries, value after the keys.
    c.token_stride = (2 * H + 2 * H) * D;
    c.key_offset = 2 * H * D;
    c.value_offset = 3 * H * D;
    c.input.assign(static_cast<size_t>(c.tokens * c.token_stride * esize), 0);
  } else {
    c.token_stride = H * D;
    c.key_offset = 0;
    c.value_offset = c.tokens * H * D;
    c.input.assign(static_cast<size_t>(2 * c.tokens * H * D * esize), 0);
  }
}

namespace {

// A value representable in `dtype`, roughly gaussian * magnitude.
float representable(std::mt19937_64& rng, DType dtype, float magnitude) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  float v = n(rng) * magnitude;
  switch (dtype) {
    case DType::bf16: return from_bits(bits_of(v) & 0xFFFF0000u);
    case DType::f16: {
      v = std::clamp(v, -60000.0f, 60000.0f);
      if (std::fabs(v) < 6.103515625e-05f) return 0.0f;  // keep to f16 normals here
      return from_bits(bits_of(v) & 0xFFFFE000u);
    }
    default: return v;
  }
}

}  // namespace

WriteCase random_case(std::mt19937_64& rng, int index, const CaseShape* shape) {
  WriteCase c;
  auto choose = [&](std::initializer_list<int64_t> v) {
    std::uniform_int_distribution<size_t> u(0, v.size() - 1);
    return *(v.begin() + u(rng));
  };
  // The layout/dtype/contiguity/index combinations cycle with the index (each of the 96 seen
  // at least twice in 200 cases); the geometry is random.
  c.spec.layout.order = index % 2 == 0 ? "HND" : "NHD";
  c.spec.layout.k_scales = (index / 2) % 2 == 0 ? "linear" : "sm100_swizzled";
  c.spec.layout.v_scales = (index / 4) % 2 == 0 ? "sm100_swizzled" : "linear";
  const DType dtypes[3] = {DType::bf16, DType::f16, DType::f32};
  c.dtype = dtypes[(index / 8) % 3];
  c.fused_qkv = (index / 24) % 2 == 1;
  c.slot_dtype = (index / 48) % 2 == 0 ? DType::i64 : DType::i32;
  c.spec.num_kv_heads = choose({1, 2, 4, 8, 32});
  c.spec.head_size = choose({64, 128, 256});
  c.spec.block_size = choose({16, 32, 64, 128});
  std::uniform_int_distribution<int64_t> tok(1, c.spec.num_kv_heads >= 32 ? 96 : 300);
  c.tokens = tok(rng);
  if (shape != nullptr) {
    c.spec.num_kv_heads = shape->num_kv_heads;
    c.spec.head_size = shape->head_size;
    c.spec.block_size = shape->block_size;
    c.tokens = shape->tokens;
  }
  const int64_t slots_needed = c.tokens + c.tokens / 2 + 1;
  c.spec.num_blocks = (slots_needed + c.spec.block_size - 1) / c.spec.block_size + 1;
  c.spec.k_scale = 1.0f;
  c.spec.v_scale = 1.0f;
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  auto scale = [&] { return u01(rng) < 0.3f ? 1.0f : std::pow(10.0f, u01(rng) * 4.0f - 3.0f); };
  c.k_scale = scale();
  c.v_scale = scale();
  c.device_scales = u01(rng) < 0.25f;
  shape_case(c);

  const int64_t H = c.spec.num_kv_heads, D = c.spec.head_size;
  for (int side = 0; side < 2; ++side) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t g = 0; g < D / 16; ++g) {
          const float magnitude = std::pow(10.0f, u01(rng) * 6.0f - 3.0f);
          for (int64_t e = 0; e < 16; ++e) {
            c.set_element(side, t, h, g * 16 + e, representable(rng, c.dtype, magnitude));
          }
        }
      }
    }
  }
  // Distinct random slots, ~10% padding.
  const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  c.slots.assign(all.begin(), all.begin() + c.tokens);
  for (auto& s : c.slots) {
    if (u01(rng) < 0.1f) s = -1;
  }
  return c;
}

// ---- references
// ----------------------------------------------------------------------------------

void reference_write(const WriteCase& c, std::vector<uint8_t>& cache) {
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const kvq_page_desc& d = layout.descriptor();
  const int64_t num_slots = d.num_blocks * d.block_size;
  const float global[2] = {nvfp4_global_scale(c.k_scale), nvfp4_global_scale(c.v_scale)};
  float x[16];
  for (int64_t i = 0; i < c.tokens; ++i) {
    const int64_t slot = c.slots[static_cast<size_t>(i)];
    if (slot < 0 || slot >= num_slots) continue;
    uint8_t* page = cache.data() + static_cast<uint64_t>(slot / d.block_size) * d.page_bytes;
    const int64_t t = slot % d.block_size;
    for (int side = 0; side < 2; ++side) {
      const auto sd = static_cast<Side>(side);
      for (int64_t h = 0; h < d.num_kv_heads; ++h) {
        for (int64_t g = 0; g < layout.groups(); ++g) {
          for (int e = 0; e < 16; ++e) x[e] = c.element(side, i, h, g * 16 + e);
          const Nvfp4Group q = nvfp4_quantize_group(x, global[side]);
          std::memcpy(page + layout.data_offset(sd, t, h, g), q.data, 8);
          page[layout.scale_offset(sd, t, h, g)] = q.scale;
        }
      }
    }
  }
}

void reference_cpu_write(const WriteCase& c, std::vector<uint8_t>& cache) {
  BackendOptions options;
  options.cache = c.spec;
  options.threads = 1;
  reference_cpu::ReferenceWriter writer(options);
  WriteArgs a;
  auto view = [&](int64_t offset) {
    TensorView v = make_view(const_cast<uint8_t*>(c.input.data()) + offset * dtype_size(c.dtype),
                             c.dtype, {c.tokens, c.spec.num_kv_heads, c.spec.head_size});
    v.strides = {c.token_stride, c.head_stride, 1, 0};
    return v;
  };
  a.key = view(c.key_offset);
  a.value = view(c.value_offset);
  std::vector<int32_t> slots32(c.slots.begin(), c.slots.end());
  a.slot_mapping = c.slot_dtype == DType::i64
                       ? make_view(const_cast<int64_t*>(c.slots.data()), DType::i64, {c.tokens})
                       : make_view(slots32.data(), DType::i32, {c.tokens});
  const auto page_bytes = static_cast<int64_t>(cache.size()) / c.spec.num_blocks;
  a.cache = make_view(cache.data(), DType::u8, {c.spec.num_blocks, page_bytes});
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  const Status s = writer.write(a);
  ASSERT_TRUE(s.is_ok()) << "reference_cpu: " << s.message();
}

// ---- device copies
// -------------------------------------------------------------------------------

DeviceCase upload_case(const WriteCase& c, const std::vector<uint8_t>& initial_cache,
                       size_t cache_offset) {
  DeviceCase d;
  d.input = DeviceBuffer(c.input.size());
  d.input.upload(c.input);
  if (c.slot_dtype == DType::i64) {
    d.slots = DeviceBuffer(c.slots.size() * 8);
    d.slots.upload(c.slots);
  } else {
    std::vector<int32_t> s32(c.slots.size());
    for (size_t i = 0; i < s32.size(); ++i) {
      const int64_t v = c.slots[i];
      s32[i] = v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : static_cast<int32_t>(v));
    }
    d.slots = DeviceBuffer(s32.size() * 4);
    d.slots.upload(s32);
  }
  // [front guard | cache | back guard] in one allocation, uploaded in one copy.
  const auto page_bytes = static_cast<int64_t>(initial_cache.size()) / c.spec.num_blocks;
  d.page_bytes = static_cast<size_t>(page_bytes);
  d.guard_bytes = (std::max<size_t>(d.page_bytes, 4096) + 255) / 256 * 256;
  d.cache_offset = cache_offset;
  d.cache_bytes = initial_cache.size();
  d.front_guard = poison(d.guard_bytes + cache_offset, 0x6A4D0001);  // not any test's cache seed
  d.back_guard = poison(d.guard_bytes, 0x6A4D0002);
  std::vector<uint8_t> all(d.front_guard);
  all.insert(all.end(), initial_cache.begin(), initial_cache.end());
  all.insert(all.end(), d.back_guard.begin(), d.back_guard.end());
  d.guarded_cache = DeviceBuffer(all.size());
  d.guarded_cache.upload(all);
  const Device dev = Device::cuda(0);
  auto* base = static_cast<uint8_t*>(d.input.get());
  const int64_t esize = dtype_size(c.dtype);
  auto view = [&](int64_t offset) {
    TensorView v = make_view(base + offset * esize, c.dtype,
                             {c.tokens, c.spec.num_kv_heads, c.spec.head_size}, dev);
    v.strides = {c.token_stride, c.head_stride, 1, 0};
    return v;
  };
  d.args.key = view(c.key_offset);
  d.args.value = view(c.value_offset);
  d.args.slot_mapping = make_view(d.slots.get(), c.slot_dtype, {c.tokens}, dev);
  d.args.cache = make_view(static_cast<uint8_t*>(d.guarded_cache.get()) + d.front_guard.size(),
                           DType::u8, {c.spec.num_blocks, page_bytes}, dev);
  d.args.k_scale = c.k_scale;
  d.args.v_scale = c.v_scale;
  if (c.device_scales) {
    const float s[2] = {c.k_scale, c.v_scale};
    d.scales = DeviceBuffer(sizeof s);
    d.scales.upload(s, sizeof s);
    d.args.k_scale_ptr = static_cast<const float*>(d.scales.get());
    d.args.v_scale_ptr = static_cast<const float*>(d.scales.get()) + 1;
    d.args.k_scale = -1.0f;  // must be ignored when the pointer is given
    d.args.v_scale = -1.0f;
  }
  return d;
}

std::vector<uint8_t> DeviceCase::download_cache() const {
  std::vector<uint8_t> got(cache_bytes);
  guarded_cache.download(got.data(), got.size(), front_guard.size());
  return got;
}

void DeviceCase::upload_cache(const std::vector<uint8_t>& bytes) {
  ASSERT_EQ(bytes.size(), cache_bytes) << "upload_cache: not the cache's size";
  guarded_cache.upload(bytes.data(), bytes.size(), front_guard.size());
}

namespace {

// "" or what cudaMemcpy said: `bytes` bytes at `offset` into `buffer`, to `host`.
std::string download_bytes(const DeviceBuffer& buffer, size_t offset, size_t bytes, void* host) {
  if (offset + bytes > buffer.bytes()) {
    return fmt::format("download of {} bytes at {} from a buffer of {}", bytes, offset,
                       buffer.bytes());
  }
  const cudaError_t e = cudaMemcpy(host, static_cast<const uint8_t*>(buffer.get()) + offset, bytes,
                                   cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) return {};
  return fmt::format("cudaMemcpy D2H of the cache and its guards: {} ({})", cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

// "" when the guards `front` and `back` (device bytes, downloaded) hold what d put there, else
// what changed (guard_band_changes).
std::string guard_report(const DeviceCase& d, const uint8_t* front, const uint8_t* back) {
  return ::kvq::test::guard_band_changes(d.front_guard, {front, d.front_guard.size()}, d.back_guard,
                                         {back, d.back_guard.size()}, d.cache_bytes, d.page_bytes);
}

}  // namespace

std::string DeviceCase::guards_changed() const {
  std::vector<uint8_t> front(front_guard.size()), back(back_guard.size());
  if (std::string e = download_bytes(guarded_cache, 0, front.size(), front.data()); !e.empty()) {
    return e;
  }
  if (std::string e =
          download_bytes(guarded_cache, front.size() + cache_bytes, back.size(), back.data());
      !e.empty()) {
    return e;
  }
  return guard_report(*this, front.data(), back.data());
}

std::vector<uint8_t> poison(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> v(bytes);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, bytes - i));
  }
  return v;
}

std::string compare_cache(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                          const kvq_page_desc& layout) {
  if (got.size() != want.size()) {
    return fmt::format("cache sizes differ: {} vs {}", got.size(), want.size());
  }
  size_t first = got.size(), count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (count++ == 0) first = i;
    }
  }
  if (count == 0) return {};
  const uint64_t page = first / layout.page_bytes, off = first % layout.page_bytes;
  const char* region = "?";
  for (int s = 0; s < 2; ++s) {
    if (off >= layout.side[s].data_base) region = s == 0 ? "K data" : "V data";
    if (off >= layout.side[s].scale_base) region = s == 0 ? "K scales" : "V scales";
  }
  return fmt::format(
      "{} bytes differ; first at byte {} (page {}, offset {} in {}): got {:#04x}, "
      "expected {:#04x}",
      count, first, page, off, region, got[first], want[first]);
}

std::string compare_cache(const DeviceCase& d, const std::vector<uint8_t>& want,
                          const kvq_page_desc& layout) {
  std::vector<uint8_t> all(d.guarded_cache.bytes());  // one copy: guards and cache
  if (std::string e = download_bytes(d.guarded_cache, 0, all.size(), all.data()); !e.empty()) {
    return e;
  }
  const size_t front = d.front_guard.size();
  if (all.size() != front + d.cache_bytes + d.back_guard.size()) {
    return fmt::format("the guarded cache holds {} bytes, not {} + {} + {}", all.size(), front,
                       d.cache_bytes, d.back_guard.size());
  }
  const std::vector<uint8_t> got(all.begin() + static_cast<std::ptrdiff_t>(front),
                                 all.begin() + static_cast<std::ptrdiff_t>(front + d.cache_bytes));
  const std::string cache = compare_cache(got, want, layout);
  const std::string guards = guard_report(d, all.data(), all.data() + front + d.cache_bytes);
  if (guards.empty()) return cache;
  return cache.empty() ? "written outside the cache: " + guards
                       : cache + "; and written outside the cache: " + guards;
}

std::string write_differs_from_reference(const WriteCase& c, uint64_t seed, size_t cache_offset) {
  const PageLayout layout = PageLayout::from_spec(c.spec);
  const std::vector<uint8_t> initial = poison(layout.cache_bytes(), seed);
  std::vector<uint8_t> want = initial;
  reference_write(c, want);
  auto writer = make_writer(c.spec);
  if (!writer) return "no writer";
  DeviceCase d = upload_case(c, initial, cache_offset);
  if (::testing::Test::HasFatalFailure()) return "a CUDA call failed (above)";
  if (const Status s = writer->write(d.args); !s) return "write refused: " + s.message();
  int64_t skipped = -1;
  if (const Status s = writer->take_out_of_range_slots(&skipped); !s) {
    return "take_out_of_range_slots: " + s.message();
  }
  const int64_t num_slots = c.spec.num_blocks * c.spec.block_size;
  const auto out_of_range =
      std::count_if(c.slots.begin(), c.slots.end(), [&](int64_t s) { return s >= num_slots; });
  if (skipped != out_of_range) {
    return fmt::format("out-of-range slots counted: {}, expected {}", skipped, out_of_range);
  }
  return compare_cache(d, want, layout.descriptor());
}

std::unique_ptr<KVCacheWriter> make_writer(const CacheSpec& spec) {
  BackendOptions o;
  o.cache = spec;
  KVCacheWriter* w = nullptr;
  const Status s = CudaWriter::create(o, &w);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return std::unique_ptr<KVCacheWriter>(w);
}

std::unique_ptr<KVCacheReader> make_reader(const CacheSpec& spec) {
  BackendOptions o;
  o.cache = spec;
  KVCacheReader* r = nullptr;
  const Status s = CudaReader::create(o, &r);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return std::unique_ptr<KVCacheReader>(r);
}

}  // namespace kvq::cuda::test
