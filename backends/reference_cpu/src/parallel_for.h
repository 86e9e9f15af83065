#pragma once
// Splits [0, n) into at most `threads` contiguous chunks and runs fn(begin, end) on each, the
// first on the calling thread. Chunks are never smaller than `min_chunk` (a thread costs tens of
// microseconds to start). Returns when all are done. If the system refuses a thread, its chunk
// runs on the calling thread instead: the result is the same, only slower.
#include <cstdint>
#include <functional>

namespace kvq::reference_cpu {

// 0 -> std::thread::hardware_concurrency() (at least 1); negative values are refused by callers.
int resolve_threads(int32_t requested);

void parallel_for(int64_t n, int threads, int64_t min_chunk,
                  const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace kvq::reference_cpu
