// The per-element write kernels of fp8_e4m3 pages (element_write_kernel.cuh), one file a format so
// that nvcc builds them in parallel.
#include "element_kernels.h"
#include "element_write_kernel.cuh"

namespace kvq::cuda {

const void* element_write_kernel_fp8_e4m3(InputType input, bool streaming) {
  return element_write_entry<KVQ_FORMAT_FP8_E4M3>(input, streaming);
}

}  // namespace kvq::cuda
