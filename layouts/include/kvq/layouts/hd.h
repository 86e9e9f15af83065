#pragma once
// KVQ_HD marks the small functions that host code and CUDA kernels share (codecs, the group
// quantizer, layout offsets): __host__ __device__ and always inlined under nvcc, plain inline
// for a host compiler. Headers using it include no CUDA header, so host-only targets build
// without the toolkit.
#if defined(__CUDACC__)
#define KVQ_HD __host__ __device__ __forceinline__
#else
#define KVQ_HD inline
#endif
