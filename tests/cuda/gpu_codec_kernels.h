#pragma once
// Test kernels over the device codecs (gpu_codec_kernels.cu): exhaustive comparisons run on the
// GPU and report a mismatch count plus the first mismatching input. Each returns a cudaError_t.
#include <cstdint>

namespace kvq::cuda::test {

struct ExhaustiveResult {
  unsigned long long mismatches = 0;
  unsigned long long checked = 0;    // inputs compared: 2^32 when the whole range ran
  uint32_t first_bad = 0xFFFFFFFFu;  // smallest mismatching float bit pattern
  uint32_t has_hw = 0;               // for the hardware E2M1 run: the image has the instruction
};

// All 2^32 float bit patterns: e2m1x8_sw / e2m1x8_hw (8 at a time, as the write kernel packs
// them) against kvq::e2m1_from_float compiled for the device.
int exhaustive_e2m1(bool hardware, ExhaustiveResult* out);

// All 2^32 float bit patterns x: e2m1x8_products(x, 1) (software), the write kernel's E2M1 of a
// product, against kvq::e2m1_from_float(x): checks the canonical NaN it relies on as well.
int exhaustive_e2m1_products(ExhaustiveResult* out);

// Every positive float in [2^-126, 2^126): rcp_rn_in_window against __frcp_rn (IEEE rcp.rn).
int exhaustive_reciprocal_in_window(ExhaustiveResult* out);

// All 2^32: the hardware E4M3 encoder the kernel uses against kvq::e4m3_from_float.
int exhaustive_e4m3(ExhaustiveResult* out);

// All 2^32 float bit patterns x in both lanes: the per-element write kernel's fp8 pair encoder
// (fp8x2_encode, cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32; element_codec.cuh) of (x, ~x) against
// kvq::e4m3_from_float / e5m2_from_float of each. format: KVQ_FORMAT_FP8_E4M3 or _E5M2.
int exhaustive_fp8_pairs(int format, ExhaustiveResult* out);

// The per-element read kernel's decode (decode_element, element_codec.cuh) of every code of
// `format` (256 fp8 codes, 65536 bf16 codes) times each of `scales` (n), as float bits:
// out[s * codes + code].
int element_decode_all(int format, const float* scales, int n, uint32_t* out);

// All 256 codes: the hardware E4M3 decoder the kernel uses, as float bits.
int e4m3_decode_all(uint32_t* out256);

// Device software E2M1 codes of `n` given bit patterns (n a multiple of 8), element i's code in
// out[i].
int e2m1_sw_codes(const uint32_t* bits, uint32_t* out, int n);

// quantize_group16 (the write kernel's quantizer, f32 input, software E2M1; step 4 by the
// in-window reciprocal when fast_rcp) on `groups` groups of 16:
// out[3*g] = scale, out[3*g+1..2] = data words.
int quantize_groups(const float* x, int groups, float global, float inv_global, bool fast_rcp,
                    uint32_t* out);

// For the decode report: a kernel that moves what a decode write moves and nothing else, launched
// as the write is (programmatic dependent launch, block_threads a block): read_bytes / 64 threads,
// each reading 64 consecutive bytes of src and writing 16 to dst (read_bytes / 4 in all; a
// write stores 18 per 64 read). read_bytes: a multiple of 64. prefetch: each thread first
// prefetches its bytes into L2 before the programmatic-launch wait, as small writes do.
// written_per_64: bytes each thread writes, 16 (NVFP4's 18 per 64, rounded), 32 (bf16 -> fp8) or
// 64 (bf16 -> bf16 pages); dst holds read_bytes / 64 * written_per_64 bytes.
int launch_stand_in_kernel(void* stream, const void* src, void* dst, uint64_t read_bytes,
                           bool prefetch, unsigned block_threads, unsigned written_per_64 = 16);

// For the ordering test: one copy of `bytes` (a multiple of 4; both pointers 16-byte aligned).
struct CopyJob {
  const void* src;
  void* dst;
  uint64_t bytes;
};

// Launches on `stream` a kernel that triggers the programmatic launch of the next kernel first
// (griddepcontrol.launch_dependents), waits about delay_ns, then runs the jobs (device_jobs: an
// array in device memory); returns the launch error.
int launch_late_copy(void* stream, const CopyJob* device_jobs, int num_jobs, uint64_t delay_ns);

// For the host cost report: launches an empty kernel taking a `param_bytes` (0 or 280, the
// write descriptor's size) parameter on `stream` (a cudaStream_t); returns the launch error.
int launch_empty_kernel(void* stream, int param_bytes);

}  // namespace kvq::cuda::test
