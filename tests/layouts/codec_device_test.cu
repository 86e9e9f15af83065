// The header-only codecs and quantizer compiled for the GPU give the same bytes as on the host:
//   - e4m3_from_float / e2m1_from_float on all 2^32 floats against CUDA's device converters
//     (the cvt.rn.satfinite hardware instructions where the architecture has them);
//   - every decoder code, and nvfp4_quantize_group / nvfp4_dequantize on a million groups
//     with several k_scales, against the host build of the same functions.
// Label gpu: skips with a message when no CUDA device is present.
// CUDA's fp4 header has unused parameters; -Wextra must not fail the build on the toolkit's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#pragma GCC diagnostic pop
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvq/layouts/nvfp4_quantize.h"

namespace kvq {
namespace {

#define KVQ_CUDA_OK(expr) \
  ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(expr)

bool have_device(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return false;
  }
  return true;
}

struct Mismatch {
  unsigned long long count;
  unsigned int first;
};

__global__ void compare_all_floats(Mismatch* e4m3, Mismatch* e2m1) {
  const uint64_t all = uint64_t{1} << 32;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < all;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const auto bits = static_cast<unsigned int>(i);
    const float f = __uint_as_float(bits);
    if (e4m3_from_float(f) != __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)) {
      atomicAdd(&e4m3->count, 1ull);
      atomicMin(&e4m3->first, bits);
    }
    if (e2m1_from_float(f) != __nv_cvt_float_to_fp4(f, __NV_E2M1, cudaRoundNearest)) {
      atomicAdd(&e2m1->count, 1ull);
      atomicMin(&e2m1->first, bits);
    }
  }
}

TEST(CodecDevice, EncodersEqualCudaDeviceConvertersOnAll2To32Floats) {
  std::string why;
  if (!have_device(why)) GTEST_SKIP() << "no CUDA device (" << why << "): device codecs not run";
  Mismatch* d = nullptr;
  KVQ_CUDA_OK(cudaMalloc(&d, 2 * sizeof(Mismatch)));
  const Mismatch init[2] = {{0, 0xFFFFFFFFu}, {0, 0xFFFFFFFFu}};
  KVQ_CUDA_OK(cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice));
  compare_all_floats<<<4096, 256>>>(d, d + 1);
  KVQ_CUDA_OK(cudaGetLastError());
  Mismatch out[2];
  KVQ_CUDA_OK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
  KVQ_CUDA_OK(cudaFree(d));
  EXPECT_EQ(out[0].count, 0u) << "E4M3: first mismatch at bits 0x" << std::hex << out[0].first;
  EXPECT_EQ(out[1].count, 0u) << "E2M1: first mismatch at bits 0x" << std::hex << out[1].first;
}

__global__ void decode_all(float* e4m3, float* e2m1) {
  const int c = threadIdx.x;
  e4m3[c] = e4m3_to_float(static_cast<uint8_t>(c));
  if (c < 16) e2m1[c] = e2m1_to_float(static_cast<uint8_t>(c));
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CodecDevice, DecodersEqualTheHostOnEveryCode) {
  std::string why;
  if (!have_device(why)) GTEST_SKIP() << "no CUDA device (" << why << "): device codecs not run";
  float* d = nullptr;
  KVQ_CUDA_OK(cudaMalloc(&d, (256 + 16) * sizeof(float)));
  decode_all<<<1, 256>>>(d, d + 256);
  KVQ_CUDA_OK(cudaGetLastError());
  std::vector<float> out(256 + 16);
  KVQ_CUDA_OK(cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  KVQ_CUDA_OK(cudaFree(d));
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(bits_of(out[c]), bits_of(e4m3_to_float(static_cast<uint8_t>(c)))) << "E4M3 " << c;
  }
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(bits_of(out[256 + c]), bits_of(e2m1_to_float(static_cast<uint8_t>(c)))) << c;
  }
}

// The k_scales the groups cycle through, on host and device alike.
__host__ __device__ inline float k_scale_of(int64_t group) {
  constexpr float kKScales[] = {1.0f, 2.0f / 448.0f, 0.37f, 3.1e-3f, 17.5f, 1e-6f};
  return kKScales[group % 6];
}

__global__ void quantize_groups(const float* x, int64_t n, uint8_t* out, float* deq) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float k_scale = k_scale_of(i);
  const Nvfp4Group g = nvfp4_quantize_group(x + 16 * i, nvfp4_global_scale(k_scale));
  out[9 * i] = g.scale;
  for (int k = 0; k < 8; ++k) {
    out[9 * i + 1 + k] = g.data[k];
    deq[16 * i + 2 * k] = nvfp4_dequantize(g.data[k] & 0xF, g.scale, k_scale);
    deq[16 * i + 2 * k + 1] = nvfp4_dequantize(g.data[k] >> 4, g.scale, k_scale);
  }
}

TEST(CodecDevice, GroupQuantizerAndDequantizeEqualTheHost) {
  std::string why;
  if (!have_device(why)) GTEST_SKIP() << "no CUDA device (" << why << "): device codecs not run";
  constexpr int64_t kGroups = 1 << 20;
  std::vector<float> x(16 * kGroups);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 99), exp(-30, 30);
  for (int64_t gi = 0; gi < kGroups; ++gi) {
    const float magnitude = std::ldexp(1.0f, exp(rng));  // groups from tiny to huge
    for (int e = 0; e < 16; ++e) {
      float v = normal(rng) * magnitude;
      const int p = pick(rng);
      if (p == 0) v = std::numeric_limits<float>::quiet_NaN();
      if (p == 1) v = -std::numeric_limits<float>::infinity();
      if (p == 2) v = -0.0f;
      x[16 * gi + e] = v;
    }
  }
  float *dx = nullptr, *ddeq = nullptr;
  uint8_t* dout = nullptr;
  KVQ_CUDA_OK(cudaMalloc(&dx, x.size() * sizeof(float)));
  KVQ_CUDA_OK(cudaMalloc(&ddeq, x.size() * sizeof(float)));
  KVQ_CUDA_OK(cudaMalloc(&dout, 9 * kGroups));
  KVQ_CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  quantize_groups<<<kGroups / 256, 256>>>(dx, kGroups, dout, ddeq);
  KVQ_CUDA_OK(cudaGetLastError());
  std::vector<uint8_t> out(9 * kGroups);
  std::vector<float> deq(x.size());
  KVQ_CUDA_OK(cudaMemcpy(out.data(), dout, out.size(), cudaMemcpyDeviceToHost));
  KVQ_CUDA_OK(cudaMemcpy(deq.data(), ddeq, deq.size() * sizeof(float), cudaMemcpyDeviceToHost));
  KVQ_CUDA_OK(cudaFree(dx));
  KVQ_CUDA_OK(cudaFree(ddeq));
  KVQ_CUDA_OK(cudaFree(dout));
  int64_t bad = 0;
  for (int64_t gi = 0; gi < kGroups && bad < 10; ++gi) {
    const float k_scale = k_scale_of(gi);
    const Nvfp4Group g = nvfp4_quantize_group(&x[16 * gi], nvfp4_global_scale(k_scale));
    bool same = out[9 * gi] == g.scale;
    for (int k = 0; k < 8; ++k) {
      same = same && out[9 * gi + 1 + k] == g.data[k];
      same = same && bits_of(deq[16 * gi + 2 * k]) ==
                         bits_of(nvfp4_dequantize(g.data[k] & 0xF, g.scale, k_scale));
      same = same && bits_of(deq[16 * gi + 2 * k + 1]) ==
                         bits_of(nvfp4_dequantize(g.data[k] >> 4, g.scale, k_scale));
    }
    if (!same) {
      ++bad;
      ADD_FAILURE() << "group " << gi << " (k_scale " << k_scale << "): device bytes differ";
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace kvq
