// The write reads its inputs, slots and device scales only once the kernel before it on the
// stream has finished, although it launches early (programmatic dependent launch) and makes part
// of its plan before its griddepcontrol.wait (docs/kernel-design.md, v12 and v30).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gpu_codec_kernels.h"
#include "gpu_test_support.h"
#include "kvq/core/dtype.h"

namespace kvq::cuda::test {
namespace {

// Case a with every input element's sign flipped, its slots rotated by one and other device
// scales: a write that read any of a's bytes would leave another cache than b's.
WriteCase other_inputs(const WriteCase& b) {
  WriteCase a = b;
  const size_t esize = dtype_size(b.dtype);
  for (size_t i = esize - 1; i < a.input.size(); i += esize) a.input[i] ^= 0x80;  // sign bits
  std::rotate(a.slots.begin(), a.slots.begin() + 1, a.slots.end());
  a.k_scale = 2.0f * b.k_scale;
  a.v_scale = 0.5f * b.v_scale;
  return a;
}

// A producer kernel that lets the write launch at once, holds for 50 us and then copies case b's
// input, slots and scales over case a's; the write, enqueued right after it, must leave exactly
// b's cache. A write that loads before its griddepcontrol.wait reads a's bytes wherever its blocks
// run during the hold (a build that loaded before the wait failed 3 of the 4 cases on an H100;
// docs/kernel-design.md, v30). One case per thread mapping on a 132-SM GPU (plan_write's bars): one
// side a thread with the early trigger (12,800 items), one group streaming (65,536), one group of
// several waves (256,000), two groups (768,192).
TEST(GpuWriterOrder, ReadsWhatTheKernelBeforeItWrote) {
  KVQ_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(20261205);
  struct Mapping {
    CaseShape shape;
    int index;  // random_case's cycle: 0 = HND bf16, i64 slots; 49 = NHD bf16, i32 slots
  };
  for (const Mapping& m : {Mapping{{8, 128, 16, 200}, 0}, Mapping{{32, 128, 16, 256}, 49},
                           Mapping{{8, 128, 16, 4000}, 0}, Mapping{{8, 128, 16, 12003}, 49}}) {
    WriteCase b = random_case(rng, m.index, &m.shape);
    b.device_scales = true;
    const WriteCase a = other_inputs(b);
    SCOPED_TRACE(b.describe());
    const PageLayout layout = PageLayout::from_spec(b.spec);
    const std::vector<uint8_t> initial = poison(layout.cache_bytes(), 77);
    std::vector<uint8_t> want = initial, from_a = initial;
    reference_write(b, want);
    reference_write(a, from_a);
    ASSERT_NE(compare_cache(from_a, want, layout.descriptor()), "") << "a and b must differ";

    DeviceCase d = upload_case(a, initial);             // the write's buffers hold a's bytes ...
    const DeviceCase staged = upload_case(b, initial);  // ... until the producer copies b's
    const CopyJob jobs[3] = {{staged.input.get(), d.input.get(), d.input.bytes()},
                             {staged.slots.get(), d.slots.get(), d.slots.bytes()},
                             {staged.scales.get(), d.scales.get(), d.scales.bytes()}};
    DeviceBuffer device_jobs(sizeof jobs);
    device_jobs.upload(jobs, sizeof jobs);
    const auto writer = make_writer(b.spec);
    ASSERT_NE(writer, nullptr);
    Stream stream;
    d.args.stream = stream.get();
    check_cuda(
        launch_late_copy(stream.get(), static_cast<const CopyJob*>(device_jobs.get()), 3, 50'000),
        "launch_late_copy");
    const Status s = writer->write(d.args);
    ASSERT_TRUE(s) << s.message();
    check_cuda(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
    EXPECT_EQ(compare_cache(d, want, layout.descriptor()), "");
  }
}

}  // namespace
}  // namespace kvq::cuda::test
