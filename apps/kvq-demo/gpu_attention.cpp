#include "gpu_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "kvq/core/kv_cache.h"
#include "kvq/core/page_layout.h"

namespace kvq::demo {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// A failure of the runtime keeps its code (a CUDA error is `runtime`: exit 1).
void check(const Status& s, const std::string& what) {
  if (!s) throw Error(s.code(), fmt::format("{}: {}", what, s.message()));
}

// An attend the attention refuses was built wrong by the demo: internal, never the user's input
// (exit 1, as a CUDA error is).
void check_attend(const Status& s, const std::string& what) {
  if (s) return;
  throw Error(s.code() == ErrorCode::runtime ? ErrorCode::runtime : ErrorCode::internal,
              fmt::format("{}: {}", what, s.message()));
}

std::string shard_name(int64_t shard, int64_t shards) {
  return shards == 1 ? std::string("GPU attention")
                     : fmt::format("GPU attention, shard {} of {}", shard, shards);
}

}  // namespace

StepTables build_step_tables(const std::vector<const Sequence*>& sequences, int64_t block_size) {
  StepTables t;
  t.num_seqs = static_cast<int64_t>(sequences.size());
  for (const Sequence* s : sequences) {
    t.max_blocks = std::max(t.max_blocks, static_cast<int64_t>(s->block_table.size()));
  }
  t.block_tables.assign(static_cast<std::size_t>(t.num_seqs * t.max_blocks), -1);
  t.seq_lens.reserve(sequences.size());
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence& s = *sequences[i];
    const int64_t needed = (s.length + block_size - 1) / block_size;
    if (s.length < 1 || s.length > kInt32Max ||
        static_cast<int64_t>(s.block_table.size()) < needed) {
      throw Error(ErrorCode::internal,
                  fmt::format("sequence {}: {} tokens in {} blocks of {}: no attention table for "
                              "it",
                              s.id, s.length, s.block_table.size(), block_size));
    }
    for (std::size_t b = 0; b < s.block_table.size(); ++b) {
      const int64_t block = s.block_table[b];
      if (block < 0 || block > kInt32Max) {
        throw Error(ErrorCode::internal,
                    fmt::format("sequence {}: block {} outside int32", s.id, block));
      }
      t.block_tables[i * static_cast<std::size_t>(t.max_blocks) + b] = static_cast<int32_t>(block);
    }
    t.seq_lens.push_back(static_cast<int32_t>(s.length));
  }
  return t;
}

uint64_t attention_bytes(const PageLayout& layout, int64_t num_q_heads, const StepTables& tables) {
  const kvq_page_desc& d = layout.descriptor();
  const uint64_t token_bytes = uint64_t{2} * static_cast<uint64_t>(d.num_kv_heads) *
                               (uint64_t{d.row_bytes} + uint64_t{d.groups});
  const auto block_size = static_cast<uint64_t>(d.block_size);
  uint64_t bytes = 0;
  for (const int32_t len : tables.seq_lens) {
    const auto tokens = static_cast<uint64_t>(std::max(len, 0));
    bytes += tokens * token_bytes + (tokens + block_size - 1) / block_size * 4 + 4;
  }
  const uint64_t elements = static_cast<uint64_t>(tables.num_seqs) *
                            static_cast<uint64_t>(num_q_heads) * static_cast<uint64_t>(d.head_size);
  return bytes + elements * (2 + 4);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2.0;
}

GpuAttention::GpuAttention(const Backend& backend, const BackendOptions& options,
                           ShardedCache& cache, int64_t group, int64_t max_seqs, int64_t max_blocks)
    : group_(group),
      head_size_(options.cache.head_size),
      num_q_heads_(options.cache.num_kv_heads * group),
      max_seqs_(max_seqs),
      max_blocks_(max_blocks),
      k_scale_(options.cache.k_scale),
      v_scale_(options.cache.v_scale) {
  const int64_t shards = cache.num_shards();
  for (int64_t i = 0; i < shards; ++i) {
    Shard s;
    s.head_begin = cache.head_begin(i);
    s.num_heads = cache.num_heads(i);
    s.runtime = cache.runtime(i);
    s.cache = cache.cache_data(i);
    BackendOptions o = options;
    o.cache.num_kv_heads = s.num_heads;
    o.device = cache.device(i);
    s.attention = backend.make_attention(o);
    const std::string name = shard_name(i, shards);
    if (!(s.attention->device() == cache.device(i)) ||
        s.attention->layout().page_bytes() != cache.layout(i).page_bytes()) {
      throw Error(ErrorCode::internal,
                  fmt::format("{}: backend '{}' made it on {} with {}-byte pages for a cache on {} "
                              "with {}-byte pages",
                              name, backend.info().name, to_string(s.attention->device()),
                              s.attention->layout().page_bytes(), to_string(cache.device(i)),
                              cache.layout(i).page_bytes()));
    }
    const int64_t q_heads = s.num_heads * group;
    check(s.attention->workspace_bytes(max_seqs, q_heads, max_blocks, &s.workspace_bytes),
          fmt::format("{}: {} sequences x {} query heads x {} blocks", name, max_seqs, q_heads,
                      max_blocks));
    const auto elements = static_cast<std::size_t>(max_seqs * q_heads * head_size_);
    s.query = DeviceBuffer(s.runtime, elements * 2, "the attention query");
    s.output = DeviceBuffer(s.runtime, elements * 4, "the attention output");
    s.block_tables = DeviceBuffer(s.runtime, static_cast<std::size_t>(max_seqs * max_blocks) * 4,
                                  "the attention block tables");
    s.seq_lens =
        DeviceBuffer(s.runtime, static_cast<std::size_t>(max_seqs) * 4, "the attention seq_lens");
    if (s.workspace_bytes > 0) {
      s.workspace = DeviceBuffer(s.runtime, s.workspace_bytes, "the attention workspace");
    }
    shards_.push_back(std::move(s));
  }
}

double GpuAttention::attend(const uint16_t* query, const StepTables& t) {
  const int64_t S = t.num_seqs;
  if (S < 1 || S > max_seqs_ || t.max_blocks > max_blocks_ ||
      static_cast<int64_t>(t.seq_lens.size()) != S ||
      static_cast<int64_t>(t.block_tables.size()) != S * t.max_blocks) {
    throw Error(ErrorCode::internal,
                fmt::format("GPU attention of {} sequences x {} blocks (tables {}, seq_lens {}): "
                            "its buffers hold 1..{} sequences x {} blocks",
                            S, t.max_blocks, t.block_tables.size(), t.seq_lens.size(), max_seqs_,
                            max_blocks_));
  }
  const int64_t shards = num_shards();
  // Staging, not timed: every shard's inputs on its device before any attend is issued.
  std::vector<AttentionArgs> args(shards_.size());
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    Shard& s = shards_[i];
    const int64_t q_heads = s.num_heads * group_;
    const auto row = static_cast<std::size_t>(q_heads * head_size_);
    const auto n = static_cast<std::size_t>(S);
    const uint16_t* q = query;
    if (q_heads != num_q_heads_) {
      // Query head j reads KV head j / group: the shard's query heads are one run per sequence.
      scratch_query_.resize(n * row);
      for (std::size_t k = 0; k < n; ++k) {
        std::memcpy(
            scratch_query_.data() + k * row,
            query + (static_cast<int64_t>(k) * num_q_heads_ + s.head_begin * group_) * head_size_,
            row * 2);
      }
      q = scratch_query_.data();
    }
    s.query.upload(q, n * row * 2);
    s.block_tables.upload(t.block_tables.data(), t.block_tables.size() * 4);
    s.seq_lens.upload(t.seq_lens.data(), n * 4);
    check(s.runtime->synchronize(), "synchronizing before GPU attention");

    const Device d = s.runtime->device();
    AttentionArgs& a = args[i];
    a.query = make_view(s.query.data(), DType::bf16, {S, q_heads, head_size_}, d);
    a.block_tables = make_view(s.block_tables.data(), DType::i32, {S, t.max_blocks}, d);
    a.seq_lens = make_view(s.seq_lens.data(), DType::i32, {S}, d);
    a.cache = cache_view(s.attention->layout(), s.cache, d);
    a.output = make_view(s.output.data(), DType::f32, {S, q_heads, head_size_}, d);
    a.k_scale = k_scale_;
    a.v_scale = v_scale_;
    if (s.workspace_bytes > 0) {
      a.workspace =
          make_view(s.workspace.data(), DType::u8, {static_cast<int64_t>(s.workspace_bytes)}, d);
    }
    a.stream = s.runtime->stream();
  }

  // Issue all, then synchronize all, as ShardedCache::write does.
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    check_attend(
        shards_[i].attention->attend(args[i]),
        fmt::format("{}: attend of {} sequences", shard_name(static_cast<int64_t>(i), shards), S));
  }
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    check(
        shards_[i].runtime->synchronize(),
        fmt::format("{}: synchronizing after attend", shard_name(static_cast<int64_t>(i), shards)));
  }
  const auto end = std::chrono::steady_clock::now();
  last_num_seqs_ = S;
  return std::chrono::duration<double>(end - start).count();
}

void GpuAttention::output(float* out) {
  const auto n = static_cast<std::size_t>(last_num_seqs_);
  for (Shard& s : shards_) {
    const int64_t q_heads = s.num_heads * group_;
    const auto row = static_cast<std::size_t>(q_heads * head_size_);
    if (q_heads == num_q_heads_) {
      s.output.download(out, n * row * 4);
      continue;
    }
    scratch_output_.resize(n * row);
    s.output.download(scratch_output_.data(), n * row * 4);
    for (std::size_t k = 0; k < n; ++k) {
      std::memcpy(
          out + (static_cast<int64_t>(k) * num_q_heads_ + s.head_begin * group_) * head_size_,
          scratch_output_.data() + k * row, row * 4);
    }
  }
}

uint64_t GpuAttention::bytes(const StepTables& tables) const {
  uint64_t total = 0;
  for (const Shard& s : shards_) {
    total += attention_bytes(s.attention->layout(), s.num_heads * group_, tables);
  }
  return total;
}

AttentionOutOfRange GpuAttention::take_out_of_range() {
  AttentionOutOfRange total;
  const int64_t shards = num_shards();
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    AttentionOutOfRange c;
    check(shards_[i].attention->take_out_of_range(&c),
          fmt::format("{}: counting skipped block ids, seq_lens and scales",
                      shard_name(static_cast<int64_t>(i), shards)));
    total.block_ids += c.block_ids;
    total.seq_lens += c.seq_lens;
    total.scales += c.scales;
  }
  return total;
}

}  // namespace kvq::demo
