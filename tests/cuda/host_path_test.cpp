// The host side of a write, without a GPU: the stream book (one entry per stream, lock-free,
// bounded), launch error wording (this launch's error vs one left over from earlier work), and a
// cost report of the host work per write (printed and recorded as test properties; no assertion
// on time: it depends on the machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "cuda_util.h"
#include "kvq/core/contract.h"
#include "kvq/core/page_layout.h"
#include "write_kernel.h"
#include "write_plan.h"

namespace kvq::cuda {
namespace {

void* fake_stream(uintptr_t i) {
  return reinterpret_cast<void*>(0x7000'0000 + 0x100 * i);
}

TEST(StreamBook, OneEntryPerStreamUntilFull) {
  StreamBook book;
  StreamBook::Entry* a = book.find_or_add(fake_stream(1));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(book.find_or_add(fake_stream(1)), a);
  StreamBook::Entry* b = book.find_or_add(fake_stream(2));
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_FALSE(a->on_device.load());
  EXPECT_FALSE(a->used.load());
  for (uintptr_t i = 3; i <= StreamBook::kCapacity; ++i) {
    ASSERT_NE(book.find_or_add(fake_stream(i)), nullptr) << i;
  }
  EXPECT_EQ(book.find_or_add(fake_stream(StreamBook::kCapacity + 1)), nullptr);
  EXPECT_EQ(book.find_or_add(fake_stream(1)), a);  // still found when full
}

TEST(StreamBook, TakeUsedReturnsEachMarkedStreamOnce) {
  StreamBook book;
  book.find_or_add(fake_stream(1))->used = true;
  book.find_or_add(fake_stream(2));
  book.find_or_add(fake_stream(3))->used = true;
  std::vector<void*> got;
  book.take_used([&](void* s) { got.push_back(s); });
  EXPECT_EQ(got, (std::vector<void*>{fake_stream(1), fake_stream(3)}));
  got.clear();
  book.take_used([&](void* s) { got.push_back(s); });
  EXPECT_TRUE(got.empty());
}

TEST(StreamBook, ConcurrentAddsClaimOneEntryPerStream) {
  for (int round = 0; round < 50; ++round) {
    StreamBook book;
    constexpr int kThreads = 8;
    constexpr uintptr_t kStreams = StreamBook::kCapacity + 4;
    std::vector<std::vector<StreamBook::Entry*>> seen(kThreads);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) {
        }
        for (uintptr_t i = 0; i < kStreams; ++i) {
          // Each thread in its own order, so claims race.
          const uintptr_t s = (i * 7 + static_cast<uintptr_t>(t) * 3) % kStreams;
          seen[static_cast<size_t>(t)].push_back(book.find_or_add(fake_stream(s)));
        }
      });
    }
    go = true;
    for (auto& th : threads) th.join();
    // Per stream: every thread got the same entry (or all got nullptr); entries distinct.
    std::set<StreamBook::Entry*> entries;
    int booked = 0;
    for (uintptr_t s = 0; s < kStreams; ++s) {
      StreamBook::Entry* first = book.find_or_add(fake_stream(s));
      if (first != nullptr) {
        ++booked;
        EXPECT_TRUE(entries.insert(first).second);
        EXPECT_EQ(first->stream.load(), fake_stream(s));
      }
    }
    EXPECT_EQ(booked, StreamBook::kCapacity);
    for (int t = 0; t < kThreads; ++t) {
      for (uintptr_t i = 0; i < kStreams; ++i) {
        const uintptr_t s = (i * 7 + static_cast<uintptr_t>(t) * 3) % kStreams;
        EXPECT_EQ(seen[static_cast<size_t>(t)][i], book.find_or_add(fake_stream(s)));
      }
    }
  }
}

TEST(LaunchStatus, NamesTheLaunchErrorAndALeftoverOneApart) {
  // The launch failed; nothing was pending.
  Status s = launch_status("write kernel", 0, PendingError{}, cudaErrorInvalidValue, 101, 128, 312);
  EXPECT_EQ(s.code(), ErrorCode::runtime);
  EXPECT_EQ(s.message(),
            "cuda write kernel launch on cuda:0 (grid 101 x 128 threads, 312-byte "
            "descriptor) failed: invalid argument (cudaErrorInvalidValue)");
  // The launch failed, and an error of earlier work was pending (and reset) before it.
  s = launch_status("read kernel", 1, PendingError{cudaErrorInvalidDevice, false},
                    cudaErrorInvalidConfiguration, 1, 256, 300);
  EXPECT_EQ(s.message(),
            "cuda read kernel launch on cuda:1 (grid 1 x 256 threads, 300-byte descriptor) "
            "failed: invalid configuration argument (cudaErrorInvalidConfiguration); before the "
            "launch another error was pending, left over from earlier work and reset here: "
            "invalid device ordinal (cudaErrorInvalidDevice)");
  // A sticky error pending: not launched, and said to be earlier work's.
  s = launch_status("write kernel", 0, PendingError{cudaErrorIllegalAddress, true},
                    cudaErrorIllegalAddress, 8, 128, 312);
  EXPECT_EQ(s.message(),
            "cuda write kernel not launched on cuda:0: the CUDA context is unusable after an "
            "earlier error, left over from earlier work (not this call's): an illegal memory "
            "access was encountered (cudaErrorIllegalAddress)");
  // The launch worked; a non-sticky leftover is only logged.
  EXPECT_TRUE(launch_status("write kernel", 0, PendingError{cudaErrorInvalidValue, false},
                            cudaSuccess, 1, 128, 312)
                  .is_ok());
}

TEST(LaunchShape, GridAndBlockAreNeverZeroOrOversized) {
  // A launch-time "invalid argument" can come from a zero or oversized grid/block: the shapes the
  // writer and reader compute stay within CUDA's limits for every item count they accept.
  for (uint32_t items : {1u, 127u, 128u, 129u, 33791u, 33792u, 1u << 20, (1u << 31) - 1}) {
    for (int sms : {0, 1, 132, 148}) {
      const LaunchShape w = launch_shape(items, sms);
      EXPECT_TRUE(w.threads == 128 || w.threads == 256) << items;
      EXPECT_GE(w.blocks, 1u) << items;
      EXPECT_LE(w.blocks, 0x7FFFFFFFu) << items;
      EXPECT_GE(uint64_t{w.blocks} * w.threads, items);
      const LaunchShape r = read_launch_shape(items);
      EXPECT_EQ(r.threads, kReadBlockThreads) << items;
      EXPECT_GE(r.blocks, 1u) << items;
      EXPECT_LE(r.blocks, 0x7FFFFFFFu) << items;
      EXPECT_GE(uint64_t{r.blocks} * r.threads, uint64_t{items} * kReadThreadsPerItem);
      EXPECT_LT(uint64_t{r.blocks - 1} * r.threads, uint64_t{items} * kReadThreadsPerItem);
    }
  }
  // One side a thread: warps 2w and 2w + 1 share items [32w, 32w + 32), so the grid covers
  // twice the items rounded up to a warp.
  for (uint32_t items : {1u, 31u, 32u, 33u, 33792u, 65536u}) {
    WriteKernelDesc desc{};
    desc.page.items = items;
    desc.groups_per_thread = 1;
    desc.sides_per_thread = 1;
    const LaunchShape w = write_launch_shape(desc, 132);
    EXPECT_GE(uint64_t{w.blocks} * w.threads, 2 * ((uint64_t{items} + 31) / 32 * 32)) << items;
    EXPECT_LT(uint64_t{w.blocks - 1} * w.threads, 2 * uint64_t{items}) << items;
  }
  // Writes of more than one wave (no streaming loads): blocks of the plan's size, one thread per
  // unit.
  for (uint32_t items : {168962u, 262144u, 540672u, 1048576u, (1u << 31) - 2}) {
    for (int groups : {1, 2}) {
      WriteKernelDesc desc{};
      desc.page.items = items;
      desc.groups_per_thread = groups;
      desc.sides_per_thread = 2;
      desc.streaming_loads = 0;
      const uint64_t units = items / static_cast<uint32_t>(groups);
      const LaunchShape w = write_launch_shape(desc, 132);
      EXPECT_EQ(w.threads, wave_block_threads(desc)) << items;
      EXPECT_LE(w.blocks, 0x7FFFFFFFu) << items;
      EXPECT_GE(uint64_t{w.blocks} * w.threads, units) << items;
      EXPECT_LT(uint64_t{w.blocks - 1} * w.threads, units) << items;
      desc.streaming_loads = 1;  // one wave: launch_shape's blocks
      EXPECT_EQ(write_launch_shape(desc, 132).threads, 256u) << items;
    }
  }
  EXPECT_EQ(launch_shape(0, 132).blocks, 0u);  // an empty write launches nothing
  EXPECT_EQ(read_launch_shape(0).blocks, 0u);
  // The descriptors are passed by value as kernel parameters (limit 4 KiB before CUDA 12.1).
  EXPECT_LE(sizeof(WriteKernelDesc), 4096u);
  EXPECT_LE(sizeof(ReadKernelDesc), 4096u);
}

// ---- host cost report ------------------------------------------------------------------------

template <class Fn>
double ns_per_call(Fn&& fn, int calls) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
  }
  return best;
}

TEST(HostCost, PlanWriteAndStreamBookReport) {
  CacheSpec spec;
  spec.num_blocks = 1000;
  spec.block_size = 16;
  spec.num_kv_heads = 8;
  spec.head_size = 128;
  spec.layout = {"HND", "linear", "sm100_swizzled"};
  const PageLayout layout = PageLayout::from_spec(spec);
  PageAddressing addressing{};
  ASSERT_TRUE(make_page_addressing(layout.descriptor(), &addressing).is_ok());
  const Device dev = Device::cuda(0);
  auto addr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  for (int64_t T : {1, 256}) {
    WriteArgs a;
    a.key = make_view(addr(0x1000'0000), DType::bf16, {T, 8, 128}, dev);
    a.value = make_view(addr(0x2000'0000), DType::bf16, {T, 8, 128}, dev);
    a.slot_mapping = make_view(addr(0x3000'0000), DType::i64, {T}, dev);
    a.cache = make_view(addr(0x4000'0000), DType::u8,
                        {1000, static_cast<int64_t>(layout.page_bytes())}, dev);
    WriteKernelDesc desc{};
    InputType input{};
    const WriteSizeBars bars{540672, 33792, 168960, 16896};  // the H200's
    int failures = 0;
    const double ns = ns_per_call(
        [&] {
          // The whole host path of a write: the contract, then the descriptor.
          const bool ok =
              check_write_args(a, layout, write_requirements(0), "cuda").is_ok() &&
              plan_write(a, layout.descriptor(), addressing, bars, &desc, &input).is_ok();
          failures += ok ? 0 : 1;
        },
        200000);
    EXPECT_EQ(failures, 0);
    std::printf("contract + plan_write bf16 [%lld, 8, 128]: %.1f ns per call\n",
                static_cast<long long>(T), ns);
    RecordProperty("plan_write_ns_T" + std::to_string(T), std::to_string(ns));
  }
  StreamBook book;
  for (uintptr_t i = 0; i < 4; ++i) book.find_or_add(fake_stream(i));
  StreamBook::Entry* sink = nullptr;
  const double ns = ns_per_call(
      [&] {
        sink = book.find_or_add(fake_stream(3));
        sink->used.store(true, std::memory_order_release);
      },
      1000000);
  ASSERT_NE(sink, nullptr);
  std::printf("stream book lookup (4th of 4 streams) + mark used: %.1f ns per call\n", ns);
  RecordProperty("stream_book_ns", std::to_string(ns));
}

}  // namespace
}  // namespace kvq::cuda
