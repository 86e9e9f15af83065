// The C arguments that crossed the boundary as the host's C++ types (plugin_glue.h).
#include "kvq/core/plugin_glue.h"

#include <cstddef>

namespace kvq {

namespace {

// The per-head scales appended in ABI 2.1: present only where the caller's struct has them.
template <class CArgs, class Args>
void head_scales_from_abi(const CArgs& c, Args* a) {
  if (c.struct_size < offsetof(CArgs, v_head_scales) + sizeof(c.v_head_scales)) return;
  if (c.k_head_scales != nullptr) a->k_head_scales = from_dlpack(*c.k_head_scales);
  if (c.v_head_scales != nullptr) a->v_head_scales = from_dlpack(*c.v_head_scales);
}

}  // namespace

kvq_device to_abi(Device d) {
  return {d.is_cuda() ? static_cast<int32_t>(kDLCUDA) : static_cast<int32_t>(kDLCPU),
          d.is_cuda() ? d.index : 0};
}

Device from_abi(kvq_device d) {
  return d.type == kDLCUDA ? Device::cuda(d.id) : Device::cpu();
}

WriteArgs to_write_args(const kvq_write_args& c) {
  WriteArgs a;
  a.key = from_dlpack(*c.key);
  a.value = from_dlpack(*c.value);
  a.slot_mapping = from_dlpack(*c.slot_mapping);
  a.cache = from_dlpack(*c.cache);
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.k_scale_ptr = c.k_scale_ptr;
  a.v_scale_ptr = c.v_scale_ptr;
  a.stream = c.stream;
  head_scales_from_abi(c, &a);
  return a;
}

ReadArgs to_read_args(const kvq_read_args& c) {
  ReadArgs a;
  a.cache = from_dlpack(*c.cache);
  a.slot_mapping = from_dlpack(*c.slot_mapping);
  a.key = from_dlpack(*c.key);
  a.value = from_dlpack(*c.value);
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.stream = c.stream;
  head_scales_from_abi(c, &a);
  return a;
}

AttentionArgs to_attention_args(const kvq_attention_args& c) {
  AttentionArgs a;
  a.query = from_dlpack(*c.query);
  a.block_tables = from_dlpack(*c.block_tables);
  a.seq_lens = from_dlpack(*c.seq_lens);
  a.cache = from_dlpack(*c.cache);
  a.output = from_dlpack(*c.output);
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.k_scale_ptr = c.k_scale_ptr;
  a.v_scale_ptr = c.v_scale_ptr;
  if (c.k_head_scales != nullptr) a.k_head_scales = from_dlpack(*c.k_head_scales);
  if (c.v_head_scales != nullptr) a.v_head_scales = from_dlpack(*c.v_head_scales);
  a.softmax_scale = c.softmax_scale;
  if (c.workspace != nullptr) a.workspace = from_dlpack(*c.workspace);
  a.stream = c.stream;
  return a;
}

std::optional<Device> requested_device(const kvq_backend_options& o) {
  if (o.has_device == 0) return std::nullopt;
  return from_abi(o.device);
}

}  // namespace kvq
