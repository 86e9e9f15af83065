// The write/read contract (contract.h): every refusal in one wording, before a call crosses.
#include "kvq/core/contract.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kvq/core/plugin_glue.h"
#include "kvq/core/scale_rule.h"
#include "kvq/core/slot_mapping.h"

namespace kvq {
namespace {

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

bool on_host(const kvq_requirements& needs) {
  return needs.device.type == kDLCPU;
}

void check_device(const TensorView& v, const char* name, const kvq_requirements& needs) {
  const Device want = from_abi(needs.device);
  if (v.device != want) {
    bad(fmt::format("{}: {}: expected {} (the writer's device)", name, v.describe(),
                    want.is_cuda() ? to_string(want) + " memory" : "host memory (cpu)"));
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
  if (reinterpret_cast<uintptr_t>(v.data) % static_cast<uintptr_t>(dtype_size(v.dtype)) != 0) {
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

// A host value is checked here; a pointer must be one aligned f32 outside the cache, and on the
// host its value is checked too (a device backend checks a device value where it reads it).
void check_scale(float value, const float* ptr, const char* name, const TensorView& cache,
                 const kvq_requirements& needs) {
  if (ptr == nullptr) {
    if (!scale_usable(value)) bad(scale_refusal(name, value));
    return;
  }
  const std::string ptr_name = fmt::format("*{}_ptr", name);
  if (!on_host(needs) && (needs.flags & KVQ_REQ_DEVICE_SCALES) == 0) {
    bad(fmt::format("{}: the backend takes host scale values only", ptr_name));
  }
  const TensorView one =
      make_view(const_cast<float*>(ptr), DType::f32, {1}, from_abi(needs.device));
  check_data(one, ptr_name.c_str());
  if (share_memory(one, cache)) {
    bad(fmt::format("{} and cache share memory: expected separate buffers", ptr_name));
  }
  if (on_host(needs) && !scale_usable(*ptr)) bad(scale_refusal(ptr_name, *ptr));
}

// A side's scales: per tensor (a host value or one device f32, check_scale) or per head
// (fp8 pages: [num_kv_heads] f32 on the backend's device, the per-tensor scale left at 1). bf16
// pages are not scaled.
void check_side_scales(float value, const float* ptr, const TensorView& heads, const char* name,
                       const PageLayout& layout, const TensorView& cache,
                       const kvq_requirements& needs, std::string_view backend) {
  const int32_t format = layout.descriptor().format;
  const std::string heads_name = fmt::format("{}_head_scales", std::string_view(name).substr(0, 1));
  if (format == KVQ_FORMAT_BF16) {
    if (value != 1.0f || ptr != nullptr || heads.data != nullptr) {
      bad(fmt::format("{}: bf16 pages are not scaled: expected {} = 1, no pointer and no {}", name,
                      name, heads_name));
    }
    return;
  }
  if (heads.data == nullptr) {
    check_scale(value, ptr, name, cache, needs);
    return;
  }
  if (format != KVQ_FORMAT_FP8_E4M3 && format != KVQ_FORMAT_FP8_E5M2) {
    bad(fmt::format("{}: per-head scales are for fp8 pages; this cache is {}", heads_name,
                    layout.format()));
  }
  if ((needs.flags & KVQ_REQ_HEAD_SCALES) == 0) {
    bad(fmt::format("{}: {} takes no per-head scales", heads_name, backend));
  }
  if (value != 1.0f || ptr != nullptr) {
    bad(
        fmt::format("{}: given with {} = {}{}: expected per-head scales alone ({} = 1, no "
                    "pointer)",
                    heads_name, name, value, ptr != nullptr ? " and a pointer" : "", name));
  }
  check_device(heads, heads_name.c_str(), needs);
  check_ndim(heads, heads_name.c_str(), 1, "[num_kv_heads]");
  check_size(heads, heads_name.c_str(), 0, layout.geometry().num_kv_heads, "num_kv_heads");
  if (heads.dtype != DType::f32) {
    bad(fmt::format("{}: dtype {}: expected f32", heads_name, dtype_name(heads.dtype)));
  }
  if (heads.shape[0] > 1 && heads.strides[0] != 1) {
    bad(fmt::format("{}: stride(0) = {}: expected a contiguous tensor (stride 1)", heads_name,
                    heads.strides[0]));
  }
  check_data(heads, heads_name.c_str());
  check_disjoint(heads, heads_name.c_str(), cache, "cache");
  if (!on_host(needs)) return;  // device values: checked by the kernel that reads them
  for (int64_t h = 0; h < heads.shape[0]; ++h) {
    const float s = heads.ptr<const float>()[h];
    if (!scale_usable(s)) bad(scale_refusal(fmt::format("{}[{}]", heads_name, h), s));
  }
}

void check_cache(const TensorView& cache, const PageLayout& layout, const kvq_requirements& needs) {
  check_device(cache, "cache", needs);
  check_ndim(cache, "cache", 2, "[num_blocks, page_bytes]");
  if (cache.dtype != DType::u8) {
    bad(fmt::format("cache: dtype {}: expected u8", dtype_name(cache.dtype)));
  }
  const auto [num_blocks, page_bytes] = layout.cache_shape();
  if (cache.shape[0] != num_blocks || cache.shape[1] != page_bytes) {
    bad(fmt::format("cache: shape [{}, {}]: expected [{}, {}] (num_blocks x page_bytes{})",
                    cache.shape[0], cache.shape[1], num_blocks, page_bytes,
                    cache.shape[0] < num_blocks || cache.shape[1] < page_bytes
                        ? "; the buffer is too small"
                        : ""));
  }
  if (!cache.is_contiguous()) {
    bad(fmt::format("cache: strides [{}, {}]: expected contiguous [{}, 1]", cache.strides[0],
                    cache.strides[1], page_bytes));
  }
  check_data(cache, "cache");
}

void check_slot_view(const TensorView& slots, int64_t num_tokens, const char* tokens_of,
                     const kvq_requirements& needs) {
  check_device(slots, "slot_mapping", needs);
  check_ndim(slots, "slot_mapping", 1, "[num_tokens]");
  if (slots.dtype != DType::i64 && slots.dtype != DType::i32) {
    bad(fmt::format("slot_mapping: dtype {}: expected i64 or i32", dtype_name(slots.dtype)));
  }
  check_size(slots, "slot_mapping", 0, num_tokens, tokens_of);
  check_strides(slots, "slot_mapping");
  if ((needs.flags & KVQ_REQ_SLOTS_CONTIGUOUS) != 0 && num_tokens > 1 && slots.strides[0] != 1) {
    bad(fmt::format("slot_mapping: stride(0) = {}: expected a contiguous tensor (stride 1)",
                    slots.strides[0]));
  }
  check_data(slots, "slot_mapping");
}

// The values, read only where they live on the host and once the memory checks have passed (a
// view that wraps around memory onto another buffer is refused before any element is read).
void check_slot_values(const TensorView& slots, int64_t num_tokens, const PageLayout& layout,
                       bool unique) {
  if (slots.device != Device::cpu()) return;  // counted by the backend (KVQ_REQ_DEVICE_SLOTS)
  const PageGeometry& g = layout.geometry();
  const int64_t capacity = g.num_blocks * g.block_size;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = slot_at(slots, i);
    if (slot >= capacity) {
      throw Error(ErrorCode::out_of_range,
                  fmt::format("slot_mapping[{}] = {}: expected < {} (num_blocks {} x block_size "
                              "{}; negative slots are padding)",
                              i, slot, capacity, g.num_blocks, g.block_size));
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

// [T, H, D] rows with what the backend declared: head_size contiguous, rows aligned.
void check_rows(const TensorView& v, const char* name, const PageLayout& layout,
                const kvq_requirements& needs, std::string_view backend) {
  check_device(v, name, needs);
  check_ndim(v, name, 3, "[num_tokens, num_kv_heads, head_size]");
  check_size(v, name, 1, layout.geometry().num_kv_heads, "num_kv_heads");
  check_size(v, name, 2, layout.geometry().head_size, "head_size");
  check_strides(v, name);
  check_data(v, name);
  if ((needs.flags & KVQ_REQ_LAST_DIM_CONTIGUOUS) != 0 && v.strides[2] != 1) {
    bad(
        fmt::format("{}: stride(2) = {}: {} needs the last dimension (head_size) "
                    "contiguous (stride 1); make it contiguous first ({})",
                    name, v.strides[2], backend, v.describe()));
  }
  const uint64_t align = needs.row_alignment > 1 ? needs.row_alignment : 1;
  if (align > 1) {
    if (reinterpret_cast<uintptr_t>(v.data) % align != 0) {
      bad(
          fmt::format("{}: data pointer {} is not {}-byte aligned: {} moves head rows {} bytes "
                      "at a time",
                      name, v.data, align, backend, align));
    }
    const auto esize = static_cast<uint64_t>(dtype_size(v.dtype));
    const char* dim_names[2] = {"token", "head"};
    for (int i = 0; i < 2; ++i) {
      const uint64_t bytes = static_cast<uint64_t>(v.strides[i]) * esize;
      if (v.shape[i] > 1 && bytes % align != 0) {
        bad(
            fmt::format("{}: {} stride {} elements = {} bytes is not a multiple of {}: every "
                        "head row must start {}-byte aligned for {}",
                        name, dim_names[i], v.strides[i], bytes, align, align, backend));
      }
    }
  }
}

// "bf16, f16 or f32"
std::string dtype_list(uint32_t mask) {
  std::vector<std::string_view> names;
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    if ((mask & (1u << static_cast<uint32_t>(t))) != 0) names.push_back(dtype_name(t));
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out.empty() ? "none (the backend declared no input dtype)" : out;
}

}  // namespace

Status check_write_args(const WriteArgs& a, const PageLayout& layout, const kvq_requirements& needs,
                        std::string_view backend) noexcept {
  return catch_as_status([&] {
    check_rows(a.key, "key", layout, needs, backend);
    if ((needs.input_dtypes & (1u << static_cast<uint32_t>(a.key.dtype))) == 0) {
      bad(fmt::format("key: dtype {}: expected {} ({}'s input dtypes)", dtype_name(a.key.dtype),
                      dtype_list(needs.input_dtypes), backend));
    }
    const int64_t num_tokens = a.key.shape[0];
    check_rows(a.value, "value", layout, needs, backend);
    if (a.value.dtype != a.key.dtype) {
      bad(fmt::format("value: dtype {}: expected {} (the dtype of key)", dtype_name(a.value.dtype),
                      dtype_name(a.key.dtype)));
    }
    check_size(a.value, "value", 0, num_tokens, "num_tokens of key");
    check_cache(a.cache, layout, needs);
    check_slot_view(a.slot_mapping, num_tokens, "num_tokens of key", needs);
    check_disjoint(a.key, "key", a.cache, "cache");
    check_disjoint(a.value, "value", a.cache, "cache");
    check_disjoint(a.slot_mapping, "slot_mapping", a.cache, "cache");
    check_slot_values(a.slot_mapping, num_tokens, layout, /*unique=*/true);
    check_side_scales(a.k_scale, a.k_scale_ptr, a.k_head_scales, "k_scale", layout, a.cache, needs,
                      backend);
    check_side_scales(a.v_scale, a.v_scale_ptr, a.v_head_scales, "v_scale", layout, a.cache, needs,
                      backend);
  });
}

Status check_read_args(const ReadArgs& a, const PageLayout& layout, const kvq_requirements& needs,
                       std::string_view backend) noexcept {
  return catch_as_status([&] {
    check_cache(a.cache, layout, needs);
    check_ndim(a.slot_mapping, "slot_mapping", 1, "[num_tokens]");
    const int64_t num_tokens = a.slot_mapping.shape[0];
    check_slot_view(a.slot_mapping, num_tokens, "num_tokens of slot_mapping", needs);
    for (const auto& [v, name] : {std::pair{a.key, "key"}, std::pair{a.value, "value"}}) {
      check_rows(v, name, layout, needs, backend);
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
    check_slot_values(a.slot_mapping, num_tokens, layout, /*unique=*/false);
    check_side_scales(a.k_scale, nullptr, a.k_head_scales, "k_scale", layout, a.cache, needs,
                      backend);
    check_side_scales(a.v_scale, nullptr, a.v_head_scales, "v_scale", layout, a.cache, needs,
                      backend);
  });
}

namespace {

// [S, Hq, D] query or output rows, with what the backend declared for them.
void check_heads(const TensorView& v, const char* name, const PageLayout& layout,
                 const kvq_requirements& needs, std::string_view backend) {
  check_device(v, name, needs);
  check_ndim(v, name, 3, "[num_seqs, num_q_heads, head_size]");
  check_size(v, name, 2, layout.geometry().head_size, "head_size");
  check_strides(v, name);
  check_data(v, name);
  if ((needs.flags & KVQ_REQ_LAST_DIM_CONTIGUOUS) != 0 && v.shape[2] > 1 && v.strides[2] != 1) {
    bad(
        fmt::format("{}: stride(2) = {}: {} needs the last dimension (head_size) contiguous "
                    "(stride 1); make it contiguous first ({})",
                    name, v.strides[2], backend, v.describe()));
  }
}

// The values of host-side block tables and seq_lens, read once their memory has passed.
void check_sequences(const TensorView& tables, const TensorView& lens, const PageLayout& layout) {
  if (tables.device != Device::cpu() || lens.device != Device::cpu()) return;  // counted instead
  const PageGeometry& g = layout.geometry();
  const int64_t max_blocks = tables.shape[1];
  for (int64_t s = 0; s < lens.shape[0]; ++s) {
    const int32_t len = lens.ptr<const int32_t>()[s * lens.strides[0]];
    if (len < 0 || len > max_blocks * g.block_size) {
      throw Error(ErrorCode::out_of_range,
                  fmt::format("seq_lens[{}] = {}: expected 0 .. {} (max_blocks_per_seq {} x "
                              "block_size {}; 0 is padding)",
                              s, len, max_blocks * g.block_size, max_blocks, g.block_size));
    }
    const int64_t used = (len + g.block_size - 1) / g.block_size;
    for (int64_t b = 0; b < used; ++b) {
      const int32_t id = tables.ptr<const int32_t>()[s * tables.strides[0] + b * tables.strides[1]];
      if (id < 0 || id >= g.num_blocks) {
        throw Error(ErrorCode::out_of_range,
                    fmt::format("block_tables[{}, {}] = {}: expected 0 .. {} (num_blocks {}; "
                                "the block holds tokens {} .. {} of a sequence of {})",
                                s, b, id, g.num_blocks - 1, g.num_blocks, b * g.block_size,
                                std::min<int64_t>(len, (b + 1) * g.block_size) - 1, len));
      }
    }
  }
}

}  // namespace

float default_softmax_scale(int64_t head_size) noexcept {
  return head_size > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size))) : 1.0f;
}

Status check_attention_args(const AttentionArgs& a, const PageLayout& layout,
                            const kvq_requirements& needs, std::string_view backend,
                            uint64_t workspace_bytes) noexcept {
  return catch_as_status([&] {
    const PageGeometry& g = layout.geometry();
    check_heads(a.query, "query", layout, needs, backend);
    if (a.query.dtype != DType::bf16 && a.query.dtype != DType::f16) {
      bad(fmt::format("query: dtype {}: expected bf16 or f16", dtype_name(a.query.dtype)));
    }
    if ((needs.input_dtypes & (1u << static_cast<uint32_t>(a.query.dtype))) == 0) {
      bad(fmt::format("query: dtype {}: expected {} ({}'s query dtypes)", dtype_name(a.query.dtype),
                      dtype_list(needs.input_dtypes), backend));
    }
    const int64_t num_seqs = a.query.shape[0], num_q_heads = a.query.shape[1];
    if (num_q_heads < 1 || num_q_heads % g.num_kv_heads != 0) {
      bad(
          fmt::format("query.shape[1] = {}: expected a positive multiple of num_kv_heads {} "
                      "(grouped-query attention: each kv head serves num_q_heads / num_kv_heads "
                      "query heads)",
                      num_q_heads, g.num_kv_heads));
    }
    check_device(a.block_tables, "block_tables", needs);
    check_ndim(a.block_tables, "block_tables", 2, "[num_seqs, max_blocks_per_seq]");
    if (a.block_tables.dtype != DType::i32) {
      bad(fmt::format("block_tables: dtype {}: expected i32", dtype_name(a.block_tables.dtype)));
    }
    check_size(a.block_tables, "block_tables", 0, num_seqs, "num_seqs of query");
    check_strides(a.block_tables, "block_tables");
    check_data(a.block_tables, "block_tables");
    check_device(a.seq_lens, "seq_lens", needs);
    check_ndim(a.seq_lens, "seq_lens", 1, "[num_seqs]");
    if (a.seq_lens.dtype != DType::i32) {
      bad(fmt::format("seq_lens: dtype {}: expected i32", dtype_name(a.seq_lens.dtype)));
    }
    check_size(a.seq_lens, "seq_lens", 0, num_seqs, "num_seqs of query");
    check_strides(a.seq_lens, "seq_lens");
    check_data(a.seq_lens, "seq_lens");
    check_cache(a.cache, layout, needs);
    check_heads(a.output, "output", layout, needs, backend);
    if (a.output.dtype != DType::bf16 && a.output.dtype != DType::f16 &&
        a.output.dtype != DType::f32) {
      bad(fmt::format("output: dtype {}: expected bf16, f16 or f32", dtype_name(a.output.dtype)));
    }
    check_size(a.output, "output", 0, num_seqs, "num_seqs of query");
    check_size(a.output, "output", 1, num_q_heads, "num_q_heads of query");
    if (a.output.elements_overlap()) {
      bad(
          fmt::format("output: strides [{}, {}, {}] give two elements the same memory: expected "
                      "an output where every element has its own",
                      a.output.strides[0], a.output.strides[1], a.output.strides[2]));
    }
    check_disjoint(a.output, "output", a.query, "query");
    check_disjoint(a.output, "output", a.block_tables, "block_tables");
    check_disjoint(a.output, "output", a.seq_lens, "seq_lens");
    check_disjoint(a.output, "output", a.cache, "cache");
    if (workspace_bytes > 0) {
      const TensorView& w = a.workspace;
      if (w.data == nullptr) {
        bad(
            fmt::format("workspace: none given: expected {} bytes on {} (workspace_bytes() for "
                        "num_seqs {}, num_q_heads {}, max_blocks_per_seq {})",
                        workspace_bytes, to_string(from_abi(needs.device)), num_seqs, num_q_heads,
                        a.block_tables.shape[1]));
      }
      check_device(w, "workspace", needs);
      check_ndim(w, "workspace", 1, "[bytes]");
      if (w.dtype != DType::u8 || !w.is_contiguous()) {
        bad(fmt::format("workspace: {}: expected contiguous u8 [bytes]", w.describe()));
      }
      if (static_cast<uint64_t>(w.shape[0]) < workspace_bytes) {
        bad(fmt::format(
            "workspace: {} bytes: expected at least {} (workspace_bytes() for "
            "num_seqs {}, num_q_heads {}, max_blocks_per_seq {})",
            w.shape[0], workspace_bytes, num_seqs, num_q_heads, a.block_tables.shape[1]));
      }
      if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) {
        bad(fmt::format("workspace: data pointer {} is not 16-byte aligned", w.data));
      }
      for (const auto& [v, name] :
           {std::pair{&a.query, "query"}, std::pair{&a.block_tables, "block_tables"},
            std::pair{&a.seq_lens, "seq_lens"}, std::pair{&a.cache, "cache"},
            std::pair{&a.output, "output"}}) {
        check_disjoint(w, "workspace", *v, name);
      }
    }
    check_sequences(a.block_tables, a.seq_lens, layout);
    check_side_scales(a.k_scale, a.k_scale_ptr, a.k_head_scales, "k_scale", layout, a.cache, needs,
                      backend);
    check_side_scales(a.v_scale, a.v_scale_ptr, a.v_head_scales, "v_scale", layout, a.cache, needs,
                      backend);
    if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale)) {
      bad(
          fmt::format("softmax_scale = {}: expected a finite value > 0 (0 asks for 1 / "
                      "sqrt(head_size))",
                      a.softmax_scale));
    }
  });
}

std::string scale_refusal(std::string_view name, float scale) {
  if (std::isnan(scale)) return fmt::format("{} = nan: {}", name, kScaleRule);
  return fmt::format("{} = {}: {}", name, scale, kScaleRule);
}

}  // namespace kvq
