#pragma once
// Slot -> (page, token-in-page), shared by the write and read kernels (work item -> (token, head,
// group): kernel_desc.h). Division by the run-time constants goes through FastDivmod (no IDIV in
// the hot path); a cache with more than 2^31 slots takes the 64-bit division, chosen once per
// launch.
#include <cstdint>

#include "kernel_desc.h"

namespace kvq::cuda {

// Where token's slot is in a [T] int64 or int32 slot mapping.
__device__ __forceinline__ const void* slot_address(const void* slots, int32_t slots_are_i64,
                                                    uint32_t token) {
  return static_cast<const char*>(slots) + static_cast<uint64_t>(token) * (slots_are_i64 ? 8 : 4);
}

// The slot at `p` (from slot_address).
__device__ __forceinline__ int64_t load_slot_at(const void* p, int32_t slots_are_i64) {
  if (slots_are_i64) return __ldg(static_cast<const long long*>(p));
  return __ldg(static_cast<const int*>(p));
}

__device__ __forceinline__ int64_t load_slot(const void* slots, int32_t slots_are_i64,
                                             uint32_t token) {
  return load_slot_at(slot_address(slots, slots_are_i64, token), slots_are_i64);
}

// For 0 <= slot < num_slots. kFitsU31: the caller knows p.slots_fit_u31 (no run-time test).
// Page: PageAddressing or ElementPage (both hold slots_fit_u31, block_div and block_size).
template <bool kFitsU31 = false, class Page>
__device__ __forceinline__ void split_slot(const Page& p, int64_t slot, uint64_t& page,
                                           uint32_t& token_in_page) {
  if (kFitsU31 || p.slots_fit_u31) {
    uint32_t q, r;
    p.block_div.divmod(static_cast<uint32_t>(slot), q, r);
    page = q;
    token_in_page = r;
  } else {
    const int64_t q = slot / p.block_size;
    page = static_cast<uint64_t>(q);
    token_in_page = static_cast<uint32_t>(slot - q * p.block_size);
  }
}

}  // namespace kvq::cuda
