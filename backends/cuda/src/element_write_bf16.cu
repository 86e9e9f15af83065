// The per-element write kernels of bf16 pages (element_write_kernel.cuh), one file a format so
// that nvcc builds them in parallel.
#include "element_kernels.h"
#include "element_write_kernel.cuh"

namespace kvq::cuda {

const void* element_write_kernel_bf16(InputType input, bool streaming) {
  return element_write_entry<KVQ_FORMAT_BF16>(input, streaming);
}

}  // namespace kvq::cuda
