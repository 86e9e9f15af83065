#pragma once
// Numbers of one timing: median/min/max of the per-launch times, and the bytes a write or read
// must move at least (each input read once, each output written once), for GB/s.
#include <cstdint>
#include <vector>

namespace kvq::app::bench {

struct TimingSummary {
  int32_t iterations = 0;
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  std::vector<double> samples_ms;  // in launch order
};

// Throws kvq::Error(internal) on an empty list.
TimingSummary summarize(std::vector<double> samples_ms);

struct ByteCounts {
  uint64_t read = 0;     // inputs
  uint64_t written = 0;  // outputs
  uint64_t total() const { return read + written; }
};

// What one row of one side (K or V) occupies in the cache: its data bytes and scale bytes;
// D/2 + D/16 for NVFP4, D for fp8, 2D for bf16.
struct RowBytes {
  int64_t input_element_bytes = 2;   // bf16
  int64_t packed_row_bytes = 0;      // per (token, head, side) in the cache
  int64_t slot_bytes = 8;            // i64 slot mapping
  int64_t output_element_bytes = 4;  // the reader's f32
};

// Write: 2*valid*H*D*in read + 2*valid*H*packed written + T*slot read. Padding slots move no rows.
ByteCounts write_bytes(int64_t tokens, int64_t valid_tokens, int64_t num_kv_heads,
                       int64_t head_size, const RowBytes& row);
// Read: 2*valid*H*packed + T*slot read; 2*T*H*D*out written (padding rows are zeros, still
// written).
ByteCounts read_bytes(int64_t tokens, int64_t valid_tokens, int64_t num_kv_heads, int64_t head_size,
                      const RowBytes& row);

// bytes / (ms / 1000) / 1e9.
double gigabytes_per_second(uint64_t bytes, double milliseconds);

}  // namespace kvq::app::bench
