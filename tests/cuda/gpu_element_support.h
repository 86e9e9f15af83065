#pragma once
// The per-element formats' GPU tests (gpu_element_*_test.cpp): a case is a WriteCase
// (gpu_test_support.h) with a page format, scales per tensor (host or device) or per head, and the
// check every test makes: the cuda writer's bytes against reference_cpu's, and the cuda reader's
// f32 bits against reference_cpu's reader, on the same cache.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.h"

namespace kvq::cuda::test {

struct ElementCase {
  WriteCase w;                  // w.spec.format: fp8_e4m3, fp8_e5m2 or bf16
  std::vector<float> heads[2];  // per-head scales [H] (K, V); empty: per tensor (w's scales)
};

inline const char* const kElementFormats[] = {"fp8_e4m3", "fp8_e5m2", "bf16"};

// random_case's geometry and inputs as a page of `format`: no scale arrangement, every element of
// ragged rows (D not a multiple of 16) filled too; scale mode by index: per tensor on the host,
// per tensor on the device, per head (fp8 only: bf16 pages take scale 1, on the host).
ElementCase random_element_case(std::mt19937_64& rng, int index, const char* format,
                                const CaseShape* shape = nullptr);

std::string describe(const ElementCase& c);

// "" when a fresh cuda writer's bytes for `c` (cache of poison(seed) bytes, pointer `cache_offset`
// bytes past an aligned one) equal reference_cpu's, the out-of-range slots were counted, nothing
// landed outside the cache, and (read_back) the cuda reader's values of the case's slots equal
// reference_cpu's reader's bit for bit; else what differs.
std::string element_write_differs(const ElementCase& c, uint64_t seed, size_t cache_offset = 0,
                                  bool read_back = true);

// reference_cpu's bytes for `c` written into `cache` (out-of-range slots skipped).
void element_reference_write(const ElementCase& c, std::vector<uint8_t>& cache);

// reference_cpu's reader: key then value [T, H, D] f32 of `slots` (in range or negative).
std::vector<float> element_reference_read(const ElementCase& c, const std::vector<uint8_t>& cache,
                                          const std::vector<int64_t>& slots);

// Device copies of the case (upload_case) with the per-head scales attached to args.
struct ElementDeviceCase {
  DeviceCase d;
  DeviceBuffer heads;  // [2, H] f32
};
void upload_element_case(const ElementCase& c, const std::vector<uint8_t>& initial_cache,
                         size_t cache_offset, ElementDeviceCase* out);

// Bits equal (reader parity: NaNs compared by their bits too). "" or the first difference.
std::string compare_floats(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace kvq::cuda::test
