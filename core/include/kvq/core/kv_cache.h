#pragma once
// The host's write and read interfaces. A plugin's writers and readers (kvq/abi/plugin.h) reach
// host code as these, after core has checked the contract (kvq/core/contract.h) for them; tests
// and tools may implement them directly. Every virtual is noexcept and reports failure as a Status.
#include <array>
#include <cstdint>

#include "kvq/core/page_layout.h"
#include "kvq/core/status.h"
#include "kvq/core/tensor_view.h"

namespace kvq {

// `data` as the cache WriteArgs / ReadArgs take: [num_blocks, page_bytes] u8, contiguous.
inline TensorView cache_view(const PageLayout& layout, void* data, Device device = Device::cpu()) {
  const std::array<int64_t, 2> shape = layout.cache_shape();
  return make_view(data, DType::u8, {shape[0], shape[1]}, device);
}

// Inputs of one write (docs/format.md):
struct WriteArgs {
  TensorView key;           // [num_tokens, num_kv_heads, head_size] bf16 | f16 | f32, any strides
  TensorView value;         // [num_tokens, num_kv_heads, head_size] same dtype as key
  TensorView slot_mapping;  // [num_tokens] i64 | i32: block * block_size + offset; < 0 pads; unique
  TensorView cache;         // [num_blocks, page_bytes] u8, contiguous, apart from every input
  float k_scale = 1.0f;     // dequantization scales, > 0, see kvq/core/scale_rule.h (the config's
                            // cache.k_scale is not read by the writer: pass it here) ...
  float v_scale = 1.0f;
  const float* k_scale_ptr = nullptr;  // ... or, when set, one f32 each on the writer's device
  const float* v_scale_ptr = nullptr;  //     (read by the kernel: a write can sit in a CUDA graph;
                                       //     one breaking the rule: see take_out_of_range_slots)
  void* stream = nullptr;    // cudaStream_t for CUDA backends (null: the device's legacy default
                             // stream); ignored by CPU backends
  TensorView k_head_scales;  // fp8 pages: [num_kv_heads] f32 on the writer's device, one scale per
  TensorView v_head_scales;  // head instead of k_scale / v_scale (then 1, no pointer); data null:
                             // none. Scale rule as for k_scale, checked where the values live.
};

// Every backend's writers and readers follow these rules (kvq's own plugins and tests hold them):
// - write() / read() may be called from several threads at once on one object. Two writes that
//   touch the same slots at the same time race on those bytes: order them (one stream, or events).
// - On a GPU, a call validates on the host and queues its work on args.stream, then returns: the
//   inputs, outputs and cache must stay alive (and the inputs unchanged) until that stream has run
//   it. On the CPU the bytes are written when the call returns.

class KVQ_API KVCacheWriter {
 public:
  virtual ~KVCacheWriter() = default;

  // Validates everything, then writes. On any error nothing has been written (for device-side
  // slot values, see take_out_of_range_slots()). A slot named twice in one write is refused where
  // the slots are on the host; where they are on the device, checking would cost a sync, so the
  // repeated slot's bytes are unspecified (each 16-element group from either token, its data and
  // scale not necessarily from the same one) while every other slot is written as usual.
  virtual Status write(const WriteArgs& args) noexcept = 0;

  virtual const PageLayout& layout() const noexcept = 0;
  virtual Device device() const noexcept = 0;

  // Slots >= num_blocks * block_size that writes skipped since the last call (GPU backends count
  // them on the device, because checking on the host would need a sync). Synchronizes with the
  // writes issued so far; resets the count. CPU backends reject such slots up front: always 0.
  // Device scales (k_scale_ptr, v_scale_ptr) are checked where they are read, for the same
  // reason: a write that found one breaking the scale rule wrote nothing, and the next take
  // returns invalid_argument saying how many tokens were not written and the last bad value
  // (*count is still set).
  // A GPU backend may wait on each stream a write used since the last call, or on the whole
  // device (cuda does once any write has been captured into a CUDA graph): take before
  // destroying such a stream (a destroyed CUDA stream's handle may not be passed to CUDA again).
  virtual Status take_out_of_range_slots(int64_t* count) noexcept = 0;
};

struct ReadArgs {
  TensorView cache;         // [num_blocks, page_bytes] u8
  TensorView slot_mapping;  // [num_tokens] i64 | i32; negative slots give zeros
  TensorView key;           // out: [num_tokens, num_kv_heads, head_size] f32, every element its
  TensorView value;         //   own memory, apart from value, the cache and the slots
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  void* stream = nullptr;    // as WriteArgs::stream
  TensorView k_head_scales;  // as WriteArgs's
  TensorView v_head_scales;
};

// Dequantizes the K and V rows of the given slots back to f32.
class KVQ_API KVCacheReader {
 public:
  virtual ~KVCacheReader() = default;
  virtual Status read(const ReadArgs& args) noexcept = 0;
  virtual const PageLayout& layout() const noexcept = 0;
  virtual Device device() const noexcept = 0;
};

}  // namespace kvq
