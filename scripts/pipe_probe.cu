// Which pipe does each SASS opcode the write kernel uses issue to? One kernel per opcode family
// (check the SASS: cuobjdump -sass), ncu's smsp__inst_executed_pipe_* counters tell. Not built by
// CMake. The H200's answers (v7, docs/kernel-design.md): FMNMX, LOP3, SHF (funnel), LEA.HI,
// IADD3, PRMT and HMNMX2 issue to the ALU pipe (half rate); FMUL and FADD to the FMA pipe, and
// VIADD, IMAD, IMAD.HI and HFMA2 to its heavy half. On a new GPU:
//   nvcc -O3 -arch=sm_90a -o pipe_probe scripts/pipe_probe.cu
//   ncu --metrics smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,\
//   smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fmaheavy.sum ./pipe_probe
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <utility>
#define N 8
#define ITERS 512
template <int K>
__global__ void k(uint32_t* io, uint32_t s) {
  uint32_t a[N];
  float f[N];
  for (int i = 0; i < N; ++i) {
    a[i] = io[threadIdx.x * N + i];
    f[i] = __uint_as_float(a[i]);
  }
#pragma unroll 4
  for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (K == 0) a[i] = (a[i] + 0x0affff02u) ^ a[(i + 1) % N];     // VIADD + LOP3
      if constexpr (K == 1) a[i] = a[i] + (a[i] >> 22);                       // LEA.HI
      if constexpr (K == 2) a[i] = __funnelshift_r(a[i], a[(i + 1) % N], 4);  // SHF.R.W
      if constexpr (K == 3) a[i] = (a[i] & 0x7F800000u) ^ s;                  // LOP3
      if constexpr (K == 4) a[i] = a[i] + a[(i + 1) % N] + a[(i + 2) % N];    // IADD3
      if constexpr (K == 5) a[i] = __umulhi(a[i], s) + a[(i + 1) % N];        // IMAD.HI
      if constexpr (K == 6) a[i] = a[i] * s + a[(i + 1) % N];                 // IMAD
      if constexpr (K == 7) {                                                 // HMNMX2 bf16x2
        __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a[i]);
        __nv_bfloat162 y = *reinterpret_cast<__nv_bfloat162*>(&a[(i + 1) % N]);
        x = __hmax2(x, y);
        a[i] = *reinterpret_cast<uint32_t*>(&x);
      }
      if constexpr (K == 8) a[i] = __byte_perm(a[i], s, 0x5410);         // PRMT
      if constexpr (K == 9) f[i] = __fadd_rn(f[i], __uint_as_float(s));  // FADD
      if constexpr (K == 11) f[i] = fmaxf(f[i], f[(i + 3) % N]);         // FMNMX 2-reg
      if constexpr (K == 12) {                                           // HFMA2 abs
        __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a[i]);
        x = __habs2(x);
        a[i] = *reinterpret_cast<uint32_t*>(&x) ^ s;
      }
    }
  }
  uint32_t r = 0;
  for (int i = 0; i < N; ++i) r ^= a[i] ^ __float_as_uint(f[i]);
  io[threadIdx.x] = r;
}
// One probe kernel per opcode K, back to back (ncu times each).
template <int... Ks>
void launch_all(uint32_t* io, std::integer_sequence<int, Ks...>) {
  (k<Ks><<<132, 256>>>(io, 3), ...);
}

int main() {
  uint32_t* io;
  cudaMalloc(&io, 256 * N * 4);
  cudaMemset(io, 0x3f, 256 * N * 4);
  launch_all(io, std::integer_sequence<int, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12>{});
  printf("done %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
