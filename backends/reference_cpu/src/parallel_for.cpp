#include "parallel_for.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace kvq::reference_cpu {

int resolve_threads(int32_t requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(int64_t n, int threads, int64_t min_chunk,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  const int64_t chunks = std::clamp<int64_t>(threads, 1, max_chunks);
  auto bounds = [&](int64_t c) { return n * c / chunks; };

  std::vector<std::thread> workers;
  std::vector<int64_t> inline_chunks;
  workers.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t c = 1; c < chunks; ++c) {
    try {
      workers.emplace_back(fn, bounds(c), bounds(c + 1));
    } catch (const std::system_error&) {
      inline_chunks.push_back(c);
    }
  }
  fn(bounds(0), bounds(1));
  for (int64_t c : inline_chunks) fn(bounds(c), bounds(c + 1));
  for (auto& w : workers) w.join();
}

}  // namespace kvq::reference_cpu
