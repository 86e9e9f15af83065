// The kernel of the hardware-vs-software E2M1 check (hw_e2m1_check.cpp has the host logic; fmt's
// compile-time format strings do not build under nvcc, so messages are made there).
#include <cuda_runtime.h>

#include "cuda_util.h"
#include "e2m1_fast.h"
#include "hw_e2m1_check.h"

namespace kvq::cuda {
namespace {

// One thread per 8 values: hw[i], sw[i] = nibble words; has_hw[0] = whether this image has the
// hardware instruction at all.
__global__ void e2m1_hw_sw_kernel(const float* in, int words, uint32_t* hw, uint32_t* sw,
                                  uint32_t* has_hw) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) *has_hw = KVQ_HAVE_HW_E2M1;
  if (i >= words) return;
  float y[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) y[k] = in[8 * i + k];
  sw[i] = e2m1x8_sw(y);
#if KVQ_HAVE_HW_E2M1
  hw[i] = e2m1x8_hw(y);
#else
  hw[i] = 0;
#endif
}

struct DeviceBuffers {
  float* in = nullptr;
  uint32_t* out = nullptr;  // [hw words | sw words | has_hw]
  ~DeviceBuffers() {
    if (in) (void)cudaFree(in);
    if (out) (void)cudaFree(out);
  }
};

}  // namespace

Status run_e2m1_hw_sw(int ordinal, const std::vector<float>& values, std::vector<uint32_t>* hw,
                      std::vector<uint32_t>* sw, bool* has_hw) noexcept {
  return catch_as_status([&] {
    DeviceGuard guard(ordinal);
    if (guard.error() != cudaSuccess) {
      throw Error(cuda_status(guard.error(), "cudaSetDevice", ordinal));
    }
    const int words = static_cast<int>(values.size() / 8);
    DeviceBuffers b;
    auto check = [&](cudaError_t err, const char* what) {
      if (err != cudaSuccess) throw Error(cuda_status(err, what, ordinal));
    };
    check(cudaMalloc(&b.in, values.size() * sizeof(float)), "cudaMalloc (E2M1 check input)");
    check(cudaMalloc(&b.out, (2 * words + 1) * sizeof(uint32_t)), "cudaMalloc (E2M1 check output)");
    check(cudaMemcpy(b.in, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (E2M1 check input)");
    // An error another call left pending on this thread is not this launch's: taken first, as
    // launch_programmatic does, so it can neither fail the probe nor be blamed on it.
    const PendingError pending = take_pending_error();
    const unsigned blocks = static_cast<unsigned>((words + 127) / 128);
    cudaError_t launch = pending.error;
    if (!pending.sticky) {
      e2m1_hw_sw_kernel<<<blocks, 128>>>(b.in, words, b.out, b.out + words, b.out + 2 * words);
      launch = cudaGetLastError();
    }
    throw_if_error(launch_status("E2M1 check kernel", ordinal, pending, launch, blocks, 128, 0));
    std::vector<uint32_t> res(2 * words + 1);
    check(cudaMemcpy(res.data(), b.out, res.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost),
          "E2M1 check kernel");
    hw->assign(res.begin(), res.begin() + words);
    sw->assign(res.begin() + words, res.begin() + 2 * words);
    *has_hw = res[2 * words] != 0;
  });
}

}  // namespace kvq::cuda
