#pragma once
// Host side of a per-element write or read (fp8_e4m3, fp8_e5m2, bf16 pages): the kernel
// descriptor for arguments the host contract has passed (kvq/core/contract.h against
// write_requirements / read_requirements). Plain C++ (no CUDA call), unit-tested without a GPU
// (tests/cuda/element_plan_test.cpp).
#include "element_kernel_desc.h"
#include "kvq/core/kv_cache.h"
#include "kvq/core/status.h"

namespace kvq::cuda {

// The write sizes where the per-element writer changes its loads (preload_element_kernels).
struct ElementWriteBars {
  uint64_t stream_max_items = 0;  // at most this many (one wave): L2 prefetch + evict-first loads
};

// The layout part of ElementPage (everything but `items` and data_access_bytes), for chunks of
// `chunk_elems` elements (chunk_elements(format) for the writer, kReadChunkElements for the
// reader). Refuses a format that is not per-element (key cache.format).
Status make_element_page(const kvq_page_desc& page, uint32_t chunk_elems, ElementPage* out);

// The widest access (at most `widest`) every chunk of the page rows starts aligned to, given the
// cache pointer: the lowest set bit of pointer | page_bytes | data bases | row bytes | widest.
int32_t element_access_bytes(const void* cache, const kvq_page_desc& page, uint32_t widest);

// Fills every field of `desc`; refuses only a write of 2^31 work items or more.
Status plan_element_write(const WriteArgs& args, const kvq_page_desc& page, const ElementPage& base,
                          const ElementWriteBars& bars, ElementWriteDesc* desc, InputType* input);

Status plan_element_read(const ReadArgs& args, const kvq_page_desc& page, const ElementPage& base,
                         ElementReadDesc* desc);

}  // namespace kvq::cuda
