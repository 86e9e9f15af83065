#pragma once
// `kvq-demo --tensor-parallel N [--devices LIST]`: how the KV heads are split and where each shard
// runs. Shard i holds KV heads [i * H / N, (i + 1) * H / N) (contiguous, as engines shard them);
// each query head attends to one KV head, so it lives in exactly one shard.
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvq/core/tensor_view.h"

namespace kvq::demo {

// Throws Error(invalid_argument) unless 1 <= n and n divides num_kv_heads; the message names
// cache.num_kv_heads and the values of N that would do.
void check_tensor_parallel(int64_t num_kv_heads, int64_t n);

// --devices LIST: comma separated, one entry per shard, each a CUDA ordinal ("1" = cuda:1),
// "cuda:N" or "cpu"; the same device may appear more than once ("0,0": two shards on cuda:0).
// Throws Error(invalid_argument) "--devices LIST: ..." naming the entry at fault.
std::vector<Device> parse_device_list(std::string_view list);

// The device of each of n shards: `listed` (from --devices, which must have n entries) or, when it
// is empty, counted up from `first`, the device the backend's runtime resolves the config's
// `device` to: cuda:K gives shard i cuda:(K + i); cpu gives every shard the CPU.
// Throws Error(invalid_argument) when `listed` has another number of entries than n.
std::vector<Device> shard_devices(int64_t n, Device first, const std::vector<Device>& listed);

}  // namespace kvq::demo
