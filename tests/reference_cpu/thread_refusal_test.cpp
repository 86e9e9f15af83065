// When the system refuses a thread (pthread_create fails: a process or cgroup at its task limit),
// parallel_for runs that chunk on the calling thread: every index is still visited exactly once.
// This binary defines pthread_create itself, so std::thread reaches it instead of libc's and a
// test can make it fail; it is a binary of its own for that reason.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel_for.h"

namespace {
enum class Refuse { none, all, every_second };
std::atomic<Refuse> refuse{Refuse::none};
std::atomic<int> attempts{0}, refused{0}, created{0};
}  // namespace

extern "C" int pthread_create(pthread_t* __restrict thread, const pthread_attr_t* __restrict attr,
                              void* (*start)(void*), void* __restrict arg) noexcept {
  using Real = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_create"));
  const int attempt = attempts++;
  if (refuse == Refuse::all || (refuse == Refuse::every_second && attempt % 2 == 1)) {
    ++refused;
    return EAGAIN;
  }
  ++created;
  return real(thread, attr, start, arg);
}

namespace kvq::reference_cpu {
namespace {

struct Chunk {
  int64_t begin, end;
  std::thread::id on;
};

// parallel_for over [0, n) with `threads` chunks, the system refusing threads as `mode` says.
std::vector<Chunk> run(int64_t n, int threads, Refuse mode) {
  attempts = refused = created = 0;
  refuse = mode;
  std::mutex m;
  std::vector<Chunk> chunks;
  parallel_for(n, threads, 1, [&](int64_t b, int64_t e) {
    const std::lock_guard<std::mutex> lock(m);
    chunks.push_back({b, e, std::this_thread::get_id()});
  });
  refuse = Refuse::none;
  return chunks;
}

void expect_each_index_once(std::vector<Chunk> chunks, int64_t n) {
  std::vector<int> seen(static_cast<size_t>(n));
  for (const Chunk& c : chunks) {
    for (int64_t i = c.begin; i < c.end; ++i) ++seen[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "index " << i;
}

TEST(ParallelForThreadRefusal, TheInterposerIsTheOneStdThreadCalls) {
  // Without this, the refusal tests below could pass by never reaching a refused thread.
  const auto chunks = run(1000, 4, Refuse::none);
  EXPECT_EQ(created.load(), 3) << "std::thread did not reach this binary's pthread_create";
  expect_each_index_once(chunks, 1000);
}

TEST(ParallelForThreadRefusal, RefusedChunksRunOnTheCallingThread) {
  const auto chunks = run(1000, 4, Refuse::all);
  EXPECT_EQ(refused.load(), 3) << "one attempt per chunk after the first";
  ASSERT_EQ(chunks.size(), 4u);
  for (const Chunk& c : chunks) EXPECT_EQ(c.on, std::this_thread::get_id());
  expect_each_index_once(chunks, 1000);
}

TEST(ParallelForThreadRefusal, SomeThreadsRefusedStillCoverEverything) {
  const auto chunks = run(1000, 5, Refuse::every_second);  // chunks 2 and 4 refused
  EXPECT_EQ(refused.load(), 2);
  EXPECT_EQ(created.load(), 2);
  ASSERT_EQ(chunks.size(), 5u);
  int inline_chunks = 0;
  for (const Chunk& c : chunks) inline_chunks += c.on == std::this_thread::get_id();
  EXPECT_EQ(inline_chunks, 3) << "the first chunk and the two refused";
  expect_each_index_once(chunks, 1000);
}

}  // namespace
}  // namespace kvq::reference_cpu
