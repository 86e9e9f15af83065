#include "argument_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <utility>

#include "kvq/core/status.h"
#include "kvq/layouts/nvfp4_quantize.h"
#include "kvq/layouts/nvfp4_scale_refusal.h"

namespace kvq::reference_cpu {
namespace {

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

void check_host(const TensorView& v, const char* name) {
  if (v.device != Device::cpu()) {
    bad(fmt::format("{}: {}: expected host memory (cpu): reference_cpu runs on the CPU", name,
                    v.describe()));
  }
}

void check_ndim(const TensorView& v, const char* name, int ndim, const char* dims) {
  if (v.ndim != ndim) {
    bad(fmt::format("{}: {}: expected {} dimension{} {}", name, v.describe(), ndim,
                    ndim == 1 ? "" : "s", dims));
  }
  for (int d = 0; d < ndim; ++d) {
    if (v.shape[d] < 0) bad(fmt::format("{}.shape[{}] = {}: expected >= 0", name, d, v.shape[d]));
  }
}

void check_size(const TensorView& v, const char* name, int dim, int64_t expected,
                const std::string& what) {
  if (v.shape[dim] != expected) {
    bad(fmt::format("{}.shape[{}] = {}: expected {} ({})", name, dim, v.shape[dim], expected,
                    what));
  }
}

void check_strides(const TensorView& v, const char* name) {
  for (int d = 0; d < v.ndim; ++d) {
    if (v.strides[d] < 0) {
      bad(fmt::format("{}.stride({}) = {}: expected >= 0 (negative strides are not supported)",
                      name, d, v.strides[d]));
    }
  }
}

void check_data(const TensorView& v, const char* name) {
  if (v.data == nullptr && v.numel() > 0) {
    bad(fmt::format("{}: {} has no data (null pointer)", name, v.describe()));
  }
  if (reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) != 0) {
    bad(fmt::format("{}: data pointer {} is not aligned to its {}-byte elements", name, v.data,
                    dtype_size(v.dtype)));
  }
}

void check_disjoint(const TensorView& a, const char* a_name, const TensorView& b,
                    const char* b_name) {
  if (share_memory(a, b)) {
    bad(fmt::format("{} and {} share memory: expected separate buffers", a_name, b_name));
  }
}

// A scale given by pointer is read here, once: it must be one aligned f32 outside the cache (the
// CUDA backend reads it while it writes the cache, and refuses the same).
float check_scale(float value, const float* ptr, const char* name, const TensorView& cache) {
  if (ptr != nullptr) {
    const TensorView one = make_view(const_cast<float*>(ptr), DType::f32, {1});
    check_data(one, name);
    if (share_memory(one, cache)) {
      bad(fmt::format("{} and cache share memory: expected separate buffers", name));
    }
  }
  const float s = ptr ? *ptr : value;
  if (!nvfp4_scale_usable(s)) bad(nvfp4_scale_refusal(name, s));
  return s;
}

void check_cache(const TensorView& cache, const Nvfp4LayoutDesc& d) {
  check_host(cache, "cache");
  check_ndim(cache, "cache", 2, "[num_blocks, page_bytes]");
  if (cache.dtype != DType::u8) {
    bad(fmt::format("cache: dtype {}: expected u8", dtype_name(cache.dtype)));
  }
  const auto page_bytes = static_cast<int64_t>(d.page_bytes);
  if (cache.shape[0] != d.num_blocks || cache.shape[1] != page_bytes) {
    bad(fmt::format("cache: shape [{}, {}]: expected [{}, {}] (num_blocks x page_bytes{})",
                    cache.shape[0], cache.shape[1], d.num_blocks, page_bytes,
                    cache.shape[0] < d.num_blocks || cache.shape[1] < page_bytes
                        ? "; the buffer is too small"
                        : ""));
  }
  if (!cache.is_contiguous()) {
    bad(fmt::format("cache: strides [{}, {}]: expected contiguous [{}, 1]", cache.strides[0],
                    cache.strides[1], page_bytes));
  }
  check_data(cache, "cache");
}

void check_slot_view(const TensorView& slots, int64_t num_tokens, const char* tokens_of) {
  check_host(slots, "slot_mapping");
  check_ndim(slots, "slot_mapping", 1, "[num_tokens]");
  if (slots.dtype != DType::i64 && slots.dtype != DType::i32) {
    bad(fmt::format("slot_mapping: dtype {}: expected i64 or i32", dtype_name(slots.dtype)));
  }
  check_size(slots, "slot_mapping", 0, num_tokens, tokens_of);
  check_strides(slots, "slot_mapping");
  check_data(slots, "slot_mapping");
}

// The values, read only once check_slot_view and the memory checks have passed (a view that
// wraps around memory onto another buffer is refused before any element is read).
void check_slot_values(const TensorView& slots, int64_t num_tokens, const Nvfp4LayoutDesc& d,
                       bool unique) {
  const int64_t capacity = d.num_blocks * d.block_size;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = slot_at(slots, i);
    if (slot >= capacity) {
      throw Error(ErrorCode::out_of_range,
                  fmt::format("slot_mapping[{}] = {}: expected < {} (num_blocks {} x block_size "
                              "{}; negative slots are padding)",
                              i, slot, capacity, d.num_blocks, d.block_size));
    }
  }
  if (!unique) return;
  if (const std::optional<RepeatedSlot> r = find_repeated_slot(slots)) {
    bad(
        fmt::format("slot_mapping[{}] = {}: the same slot as slot_mapping[{}]: expected each slot "
                    "at most once per write",
                    r->index, r->slot, r->first));
  }
}

void check_rows(const TensorView& v, const char* name, const Nvfp4LayoutDesc& d) {
  check_host(v, name);
  check_ndim(v, name, 3, "[num_tokens, num_kv_heads, head_size]");
  check_size(v, name, 1, d.num_heads, "num_kv_heads");
  check_size(v, name, 2, d.head_size, "head_size");
  check_strides(v, name);
  check_data(v, name);
}

}  // namespace

CheckedWrite check_write(const WriteArgs& a, const Nvfp4LayoutDesc& d) {
  check_rows(a.key, "key", d);
  if (a.key.dtype != DType::bf16 && a.key.dtype != DType::f16 && a.key.dtype != DType::f32) {
    bad(fmt::format("key: dtype {}: expected bf16, f16 or f32", dtype_name(a.key.dtype)));
  }
  const int64_t num_tokens = a.key.shape[0];
  check_rows(a.value, "value", d);
  if (a.value.dtype != a.key.dtype) {
    bad(fmt::format("value: dtype {}: expected {} (the dtype of key)", dtype_name(a.value.dtype),
                    dtype_name(a.key.dtype)));
  }
  check_size(a.value, "value", 0, num_tokens, "num_tokens of key");
  check_cache(a.cache, d);
  check_slot_view(a.slot_mapping, num_tokens, "num_tokens of key");
  check_disjoint(a.key, "key", a.cache, "cache");
  check_disjoint(a.value, "value", a.cache, "cache");
  check_disjoint(a.slot_mapping, "slot_mapping", a.cache, "cache");
  check_slot_values(a.slot_mapping, num_tokens, d, /*unique=*/true);
  CheckedWrite out;
  out.num_tokens = num_tokens;
  out.k_scale =
      check_scale(a.k_scale, a.k_scale_ptr, a.k_scale_ptr ? "*k_scale_ptr" : "k_scale", a.cache);
  out.v_scale =
      check_scale(a.v_scale, a.v_scale_ptr, a.v_scale_ptr ? "*v_scale_ptr" : "v_scale", a.cache);
  return out;
}

int64_t check_read(const ReadArgs& a, const Nvfp4LayoutDesc& d) {
  check_cache(a.cache, d);
  check_ndim(a.slot_mapping, "slot_mapping", 1, "[num_tokens]");
  const int64_t num_tokens = a.slot_mapping.shape[0];
  check_slot_view(a.slot_mapping, num_tokens, "num_tokens of slot_mapping");
  for (const auto& [v, name] : {std::pair{a.key, "key"}, std::pair{a.value, "value"}}) {
    check_rows(v, name, d);
    if (v.dtype != DType::f32) {
      bad(fmt::format("{}: dtype {}: expected f32 (dequantized output)", name,
                      dtype_name(v.dtype)));
    }
    check_size(v, name, 0, num_tokens, "num_tokens of slot_mapping");
    if (v.elements_overlap()) {
      bad(
          fmt::format("{}: strides [{}, {}, {}] give two elements the same memory: expected an "
                      "output where every element has its own",
                      name, v.strides[0], v.strides[1], v.strides[2]));
    }
    check_disjoint(v, name, a.cache, "cache");
    check_disjoint(v, name, a.slot_mapping, "slot_mapping");
  }
  check_disjoint(a.key, "key", a.value, "value");
  check_slot_values(a.slot_mapping, num_tokens, d, /*unique=*/false);
  (void)check_scale(a.k_scale, nullptr, "k_scale", a.cache);
  (void)check_scale(a.v_scale, nullptr, "v_scale", a.cache);
  return num_tokens;
}

}  // namespace kvq::reference_cpu
