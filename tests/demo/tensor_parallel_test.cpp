// kvq-demo --tensor-parallel / --devices (unit): the head split check, the device list parser and
// where shards go by default; every refusal's message exactly.
#include "tensor_parallel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvq/core/status.h"

namespace kvq::demo {
namespace {

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    return e.what();
  }
  return "(no error)";
}

TEST(TensorParallel, NMustDivideTheKvHeads) {
  for (int64_t n : {1, 2, 4, 8}) EXPECT_NO_THROW(check_tensor_parallel(8, n)) << n;
  EXPECT_EQ(message_of([] { check_tensor_parallel(8, 3); }),
            "--tensor-parallel 3: the 8 KV heads (cache.num_kv_heads) cannot be split into 3 "
            "equal shards: expected one of 1, 2, 4, 8");
  EXPECT_EQ(message_of([] { check_tensor_parallel(8, 16); }),
            "--tensor-parallel 16: the 8 KV heads (cache.num_kv_heads) cannot be split into 16 "
            "equal shards: expected one of 1, 2, 4, 8");
  EXPECT_EQ(message_of([] { check_tensor_parallel(4, 0); }),
            "--tensor-parallel 0: the 4 KV heads (cache.num_kv_heads) cannot be split into 0 "
            "equal shards: expected one of 1, 2, 4");
  EXPECT_EQ(message_of([] { check_tensor_parallel(6, -2); }),
            "--tensor-parallel -2: the 6 KV heads (cache.num_kv_heads) cannot be split into -2 "
            "equal shards: expected one of 1, 2, 3, 6");
}

TEST(TensorParallel, DeviceListTakesOrdinalsCudaWordsAndCpu) {
  EXPECT_EQ(parse_device_list("0,1"), (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));
  EXPECT_EQ(parse_device_list("0,0"), (std::vector<Device>{Device::cuda(0), Device::cuda(0)}));
  EXPECT_EQ(parse_device_list("cuda:3,2,cpu"),
            (std::vector<Device>{Device::cuda(3), Device::cuda(2), Device::cpu()}));
  EXPECT_EQ(parse_device_list("7"), (std::vector<Device>{Device::cuda(7)}));
}

TEST(TensorParallel, DeviceListRefusesAnythingElse) {
  const std::string tail = "': expected a CUDA ordinal (0, 1, ...), cuda:N or cpu";
  EXPECT_EQ(message_of([] { parse_device_list(""); }), "--devices : entry 0 is '" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("0,,1"); }), "--devices 0,,1: entry 1 is '" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("0,"); }), "--devices 0,: entry 1 is '" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("-1"); }), "--devices -1: entry 0 is '-1" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("0, 1"); }), "--devices 0, 1: entry 1 is ' 1" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("gpu0"); }),
            "--devices gpu0: entry 0 is 'gpu0" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("auto"); }),
            "--devices auto: entry 0 is 'auto" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("cuda:x"); }),
            "--devices cuda:x: entry 0 is 'cuda:x" + tail);
  EXPECT_EQ(message_of([] { parse_device_list("1x"); }), "--devices 1x: entry 0 is '1x" + tail);
}

TEST(TensorParallel, ShardsCountUpFromTheBackendsDeviceUnlessListed) {
  EXPECT_EQ(shard_devices(1, Device::cuda(0), {}), (std::vector<Device>{Device::cuda(0)}));
  EXPECT_EQ(shard_devices(2, Device::cuda(0), {}),
            (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));
  // The config's `device: cuda:2` is where the first shard goes.
  EXPECT_EQ(shard_devices(3, Device::cuda(2), {}),
            (std::vector<Device>{Device::cuda(2), Device::cuda(3), Device::cuda(4)}));
  // A CPU backend: every shard on the CPU.
  EXPECT_EQ(shard_devices(4, Device::cpu(), {}), std::vector<Device>(4, Device::cpu()));
  // --devices wins, repeats allowed.
  const std::vector<Device> listed = {Device::cuda(0), Device::cuda(0)};
  EXPECT_EQ(shard_devices(2, Device::cuda(5), listed), listed);
  EXPECT_EQ(message_of([&] { shard_devices(4, Device::cuda(0), listed); }),
            "--devices: 2 devices for --tensor-parallel 4: expected one per shard");
  EXPECT_EQ(message_of([] { shard_devices(2, Device::cuda(0), {Device::cuda(1)}); }),
            "--devices: 1 device for --tensor-parallel 2: expected one per shard");
}

}  // namespace
}  // namespace kvq::demo
