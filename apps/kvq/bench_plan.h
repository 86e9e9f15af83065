#pragma once
// Which cases `kvq bench` runs: shapes x block sizes x token counts (x thread counts on CPUs).
// Defaults follow issue 7: T in {1 .. 65536}, (H, D) in six shapes, block_size 16, and 64, 128
// for the main shape (8, 128). CPU backends get a smaller sweep (T <= 4096) so they finish in
// under a minute.
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace kvq::app::bench {

// One (H, D[, block_size]) item of --shapes: "8x128" or "8x128x16".
struct Shape {
  int64_t num_kv_heads = 0;
  int64_t head_size = 0;
  std::optional<int64_t> block_size;  // unset: 16, plus 64 and 128 for the main shape
  friend bool operator==(const Shape&, const Shape&) = default;
};

struct Case {
  int64_t num_kv_heads = 0;  // H
  int64_t head_size = 0;     // D
  int64_t block_size = 0;    // tokens per page
  int64_t tokens = 0;        // T: rows written per call (padding slots included)
  int32_t threads = 0;       // CPU worker threads; 0 for device backends
  friend bool operator==(const Case&, const Case&) = default;
};

struct PlanRequest {
  bool cpu = false;  // the backend runs on host memory
  std::optional<std::vector<Shape>> shapes;
  std::optional<std::vector<int64_t>> tokens;
  std::optional<std::vector<int32_t>> threads;  // CPU only; default {1, 2}
};

inline constexpr int64_t kMainHeads = 8;
inline constexpr int64_t kMainHeadSize = 128;
inline constexpr int64_t kCpuMaxDefaultTokens = 4096;
// The most tokens --tokens takes for one case: 2^31 - 1, the most one write call of the
// cuda backend takes (32-bit work-item indices) and far past any engine's batch. A larger
// T would time nothing an engine does, and its sizes (T x H x D elements) could pass 64 bits.
inline constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
// The most query heads --fused-qkv takes: past any model's (DeepSeek's 128, Llama 405B's 128).
inline constexpr int64_t kMaxFusedQueryHeads = 1024;

// "8x128,1x128x64" -> shapes. Throws kvq::Error(invalid_argument) naming the bad item.
std::vector<Shape> parse_shapes(std::string_view list);
// "1,16,64" -> integers in [1, max]. `what` names the option in errors ("--tokens").
std::vector<int64_t> parse_positive_list(std::string_view list, std::string_view what,
                                         int64_t max = std::numeric_limits<int64_t>::max());

std::vector<Shape> default_shapes(bool cpu);
std::vector<int64_t> default_tokens(bool cpu);

// Cases in the order they run: shape, block size, T, threads (innermost).
std::vector<Case> make_plan(const PlanRequest& request);

}  // namespace kvq::app::bench
