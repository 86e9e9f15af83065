#pragma once
// Decode-attention test cases shared by the reference and the GPU suites (header-only): random
// sequences whose pages lie in random order in the cache, K/V rows written by the reference
// writer, a bf16 or f16 query, and the direct f64 attention on the original rows.
//
//   cache   [num_blocks, page_bytes]: every sequence's ceil(len / block_size) pages, shuffled,
//           plus a few spare pages of random bytes nothing refers to
//   tables  [S, max_blocks] i32: entries past a sequence's pages hold -1 (never read)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvq/core/attention.h"
#include "kvq/core/bf16.h"
#include "kvq/core/cache_spec.h"
#include "kvq/core/page_layout.h"
#include "kvq/reference_cpu/reference_attention.h"
#include "kvq/reference_cpu/reference_reader.h"
#include "kvq/reference_cpu/reference_writer.h"

namespace kvq::test {

inline float attention_f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  uint32_t u;
  if (e == 0x1F) {
    u = sign | 0x7F800000u | (m << 13);
  } else if (e == 0) {
    const float f = static_cast<float>(m) * std::ldexp(1.0f, -24);
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f16 bits of a float in f16's normal range, rounded to nearest even (queries are built from it).
inline uint16_t attention_float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t mag = u & 0x7FFFFFFFu;
  if (mag < 0x38800000u) return sign;  // below f16's normal range: zero (never generated)
  mag += 0x0FFFu + ((mag >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((mag - 0x38000000u) >> 13));
}

struct AttentionShape {
  std::string format = "nvfp4";  // nvfp4 | fp8_e4m3 | fp8_e5m2 | bf16
  std::string order = "HND";
  std::string k_scales, v_scales;  // "" = the format's default
  int64_t num_kv_heads = 2, group = 4, head_size = 128, block_size = 16;
  std::vector<int32_t> seq_lens;   // one per sequence (0: padding)
  int64_t extra_table_blocks = 1;  // table width past the longest sequence's pages
  DType query_dtype = DType::bf16;
  float query_gain = 1.0f;  // query magnitude: larger gives a peakier softmax
};

struct AttentionCase {
  AttentionShape shape;
  CacheSpec spec;
  int64_t num_seqs = 0, num_q_heads = 0, max_blocks = 0, num_tokens = 0;
  std::vector<int32_t> seq_lens, block_tables;  // [S], [S, max_blocks]
  std::vector<uint16_t> query;                  // [S, Hq, D] bits of query_dtype
  std::vector<float> key, value;                // [num_tokens, H, D] written rows (bf16-exact)
  std::vector<int64_t> token_seq, token_pos;    // which sequence / position each row is
  std::vector<int64_t> slots;                   // [num_tokens]
  std::vector<uint8_t> cache;                   // [num_blocks, page_bytes]
  float k_scale = 1.0f, v_scale = 1.0f;

  float query_at(int64_t s, int64_t q, int64_t d) const {
    const uint16_t b = query[static_cast<size_t>((s * num_q_heads + q) * shape.head_size + d)];
    return shape.query_dtype == DType::bf16 ? bf16_to_float(b) : attention_f16_to_float(b);
  }
  std::string describe() const {
    int32_t longest = 0;
    for (int32_t l : seq_lens) longest = std::max(longest, l);
    const CacheSpec words = PageLayout::resolved(spec);  // the arrangements the layout chose
    return fmt::format("{} {} K {} V {} H={} G={} D={} bs={} S={} longest={} tokens={} q={}",
                       words.format, words.layout.order, words.layout.k_scales,
                       words.layout.v_scales, shape.num_kv_heads, shape.group, shape.head_size,
                       shape.block_size, num_seqs, longest, num_tokens,
                       dtype_name(shape.query_dtype));
  }
};

// K, V gaussian with a few louder tokens; the query gaussian times query_gain / sqrt(D) scaled
// back up by sqrt(D), so scores are N(0, query_gain^2)-ish at softmax_scale 1/sqrt(D).
inline AttentionCase make_attention_case(const AttentionShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  AttentionCase c;
  c.shape = shape;
  c.num_seqs = static_cast<int64_t>(shape.seq_lens.size());
  c.num_q_heads = shape.num_kv_heads * shape.group;
  c.seq_lens = shape.seq_lens;
  const int64_t T = shape.block_size, H = shape.num_kv_heads, D = shape.head_size;
  int64_t pages = 0, widest = 0;
  for (int32_t len : shape.seq_lens) {
    const int64_t p = (len + T - 1) / T;
    pages += p;
    widest = std::max(widest, p);
    c.num_tokens += len;
  }
  c.max_blocks = std::max<int64_t>(1, widest + shape.extra_table_blocks);
  const int64_t spare = 3;
  c.spec.format = shape.format;
  c.spec.num_blocks = pages + spare;
  c.spec.block_size = T;
  c.spec.num_kv_heads = H;
  c.spec.head_size = D;
  c.spec.layout.order = shape.order;
  c.spec.layout.k_scales = shape.k_scales;
  c.spec.layout.v_scales = shape.v_scales;

  std::vector<int32_t> order(static_cast<size_t>(c.spec.num_blocks));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  c.block_tables.assign(static_cast<size_t>(c.num_seqs * c.max_blocks), -1);
  size_t next = 0;
  for (int64_t s = 0; s < c.num_seqs; ++s) {
    const int64_t p = (c.seq_lens[static_cast<size_t>(s)] + T - 1) / T;
    for (int64_t b = 0; b < p; ++b) {
      c.block_tables[static_cast<size_t>(s * c.max_blocks + b)] = order[next++];
    }
  }

  const auto rows = static_cast<size_t>(c.num_tokens * H * D);
  c.key.resize(rows);
  c.value.resize(rows);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  size_t i = 0;
  for (int64_t s = 0; s < c.num_seqs; ++s) {
    for (int64_t j = 0; j < c.seq_lens[static_cast<size_t>(s)]; ++j) {
      const float loud = unit(rng) < 0.02f ? 4.0f : 1.0f;
      const int64_t page = c.block_tables[static_cast<size_t>(s * c.max_blocks + j / T)];
      c.slots.push_back(page * T + j % T);
      c.token_seq.push_back(s);
      c.token_pos.push_back(j);
      for (int64_t e = 0; e < H * D; ++e, ++i) {
        c.key[i] = bf16_to_float(float_to_bf16(gauss(rng) * loud));
        c.value[i] = bf16_to_float(float_to_bf16(gauss(rng)));
      }
    }
  }
  float k_amax = 0.0f, v_amax = 0.0f;
  for (size_t e = 0; e < rows; ++e) {
    k_amax = std::max(k_amax, std::fabs(c.key[e]));
    v_amax = std::max(v_amax, std::fabs(c.value[e]));
  }
  if (shape.format == "nvfp4") {
    c.k_scale = std::max(k_amax, 1e-3f) / 2688.0f;
    c.v_scale = std::max(v_amax, 1e-3f) / 2688.0f;
  } else if (shape.format != "bf16") {
    c.k_scale = std::max(k_amax, 1e-3f) / 448.0f;
    c.v_scale = std::max(v_amax, 1e-3f) / 448.0f;
  }

  c.query.resize(static_cast<size_t>(c.num_seqs * c.num_q_heads * D));
  for (auto& q : c.query) {
    const float x = gauss(rng) * shape.query_gain;
    q = shape.query_dtype == DType::bf16 ? float_to_bf16(x) : attention_float_to_f16(x);
  }

  reference_cpu::ReferenceWriter writer(PageLayout::from_spec(c.spec), 1);
  std::mt19937_64 bytes(seed ^ 0x9E3779B97F4A7C15ull);
  c.cache.resize(writer.layout().cache_bytes());
  for (auto& b : c.cache) b = static_cast<uint8_t>(bytes());  // unwritten bytes are noise
  if (c.num_tokens > 0) {
    std::vector<uint16_t> kb(rows), vb(rows);
    for (size_t e = 0; e < rows; ++e) {
      kb[e] = float_to_bf16(c.key[e]);
      vb[e] = float_to_bf16(c.value[e]);
    }
    WriteArgs w;
    w.key = make_view(kb.data(), DType::bf16, {c.num_tokens, H, D});
    w.value = make_view(vb.data(), DType::bf16, {c.num_tokens, H, D});
    w.slot_mapping = make_view(c.slots.data(), DType::i64, {c.num_tokens});
    w.cache = cache_view(writer.layout(), c.cache.data());
    w.k_scale = c.k_scale;
    w.v_scale = c.v_scale;
    throw_if_error(writer.write(w));
  }
  return c;
}

// The direct attention in f64 over rows k, v ([num_tokens, H, D] in the case's token order): the
// original rows, or the ones read back from the pages. [S, Hq, D].
inline std::vector<double> direct_attention(const AttentionCase& c, const std::vector<float>& k,
                                            const std::vector<float>& v, double softmax_scale) {
  const int64_t H = c.shape.num_kv_heads, D = c.shape.head_size, G = c.shape.group;
  std::vector<double> out(static_cast<size_t>(c.num_seqs * c.num_q_heads * D), 0.0);
  int64_t first = 0;
  for (int64_t s = 0; s < c.num_seqs; ++s) {
    const int64_t n = c.seq_lens[static_cast<size_t>(s)];
    for (int64_t q = 0; q < c.num_q_heads; ++q) {
      const int64_t h = q / G;
      std::vector<double> x(static_cast<size_t>(n));
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) {
          dot += static_cast<double>(c.query_at(s, q, d)) *
                 k[static_cast<size_t>(((first + j) * H + h) * D + d)];
        }
        x[static_cast<size_t>(j)] = softmax_scale * dot;
        top = std::max(top, x[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      double* o = &out[static_cast<size_t>((s * c.num_q_heads + q) * D)];
      for (int64_t j = 0; j < n; ++j) {
        const double p = std::exp(x[static_cast<size_t>(j)] - top);
        sum += p;
        for (int64_t d = 0; d < D; ++d) {
          o[d] += p * v[static_cast<size_t>(((first + j) * H + h) * D + d)];
        }
      }
      for (int64_t d = 0; d < D && sum > 0.0; ++d) o[d] /= sum;
    }
    first += n;
  }
  return out;
}

// The case's rows as the reference reader reads them back from the pages (the dequantized
// values the attention sees), in the case's token order.
inline void read_back(const AttentionCase& c, std::vector<float>* k, std::vector<float>* v) {
  const int64_t H = c.shape.num_kv_heads, D = c.shape.head_size;
  k->assign(static_cast<size_t>(c.num_tokens * H * D), 0.0f);
  v->assign(k->size(), 0.0f);
  if (c.num_tokens == 0) return;
  reference_cpu::ReferenceReader reader(PageLayout::from_spec(c.spec), 1);
  ReadArgs r;
  std::vector<uint8_t> cache = c.cache;
  std::vector<int64_t> slots = c.slots;
  r.cache = cache_view(reader.layout(), cache.data());
  r.slot_mapping = make_view(slots.data(), DType::i64, {c.num_tokens});
  r.key = make_view(k->data(), DType::f32, {c.num_tokens, H, D});
  r.value = make_view(v->data(), DType::f32, {c.num_tokens, H, D});
  r.k_scale = c.k_scale;
  r.v_scale = c.v_scale;
  throw_if_error(reader.read(r));
}

// max |a - b| / max |b| (0 when b is all zeros and a equals it).
inline double max_error_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0.0, top = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    top = std::max(top, std::fabs(b[i]));
  }
  return top > 0.0 ? err / top : err;
}

// The case's attention args over host buffers (cache, query, tables, lens) and `out` f32.
inline AttentionArgs host_attention_args(AttentionCase& c, const PageLayout& layout,
                                         std::vector<float>* out) {
  out->assign(static_cast<size_t>(c.num_seqs * c.num_q_heads * c.shape.head_size), -7.0f);
  AttentionArgs a;
  a.query = make_view(c.query.data(), c.shape.query_dtype,
                      {c.num_seqs, c.num_q_heads, c.shape.head_size});
  a.block_tables = make_view(c.block_tables.data(), DType::i32, {c.num_seqs, c.max_blocks});
  a.seq_lens = make_view(c.seq_lens.data(), DType::i32, {c.num_seqs});
  a.cache = cache_view(layout, c.cache.data());
  a.output = make_view(out->data(), DType::f32, {c.num_seqs, c.num_q_heads, c.shape.head_size});
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  return a;
}

}  // namespace kvq::test
