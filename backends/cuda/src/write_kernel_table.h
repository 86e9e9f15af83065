#pragma once
// Every write kernel cuda compiles, one row each, and the one rule that picks a row for a
// write (choose_write_kernel). write_kernel.cu instantiates one kernel per row from this table,
// and plan_write fills the descriptor's mapping from the chosen row: adding a kernel is adding a
// row here. Each rule names the measurement behind it by its tag in docs/kernel-design.md. Plain
// C++ (no CUDA header), so the choice is unit-tested without a GPU.
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace kvq::cuda {

struct WriteKernelRow {
  const char* name;
  int groups;          // 16-element groups a thread quantizes (G)
  int sides;           // 2: K and V of its groups; 1: one side (warps 2w and 2w + 1 share items)
  bool streaming;      // inputs prefetched into L2 before the programmatic-launch wait, then
                       // loaded evict-first
  bool early_trigger;  // the next kernel may launch before this grid's wait
  bool common;         // compiled without the general paths' run-time tests (common_path_holds)
  const char* tag;     // docs/kernel-design.md
};

// Row order is the order of the rule in choose_write_kernel.
inline constexpr WriteKernelRow kWriteKernels[] = {
    // Large writes of 16-bit input and an even group count: two groups a thread once the GPU
    // holds them at least twice over (bars.pair_min_items).
    {.name = "two_groups",
     .groups = 2,
     .sides = 2,
     .streaming = false,
     .early_trigger = false,
     .common = false,
     .tag = "v6, v28"},
    // Writes too small to fill the GPU (bars.split_max_items): one side a thread halves each
    // thread's chain of dependent instructions; the smallest also trigger the next launch early.
    {.name = "split_early",
     .groups = 1,
     .sides = 1,
     .streaming = true,
     .early_trigger = true,
     .common = false,
     .tag = "v8, v32"},
    {.name = "split",
     .groups = 1,
     .sides = 1,
     .streaming = true,
     .early_trigger = false,
     .common = false,
     .tag = "v8, v32"},
    // Up to one wave (bars.stream_max_items): every block is resident at once, so all prefetch
    // under the previous write; the common case runs a kernel without the general paths' tests.
    {.name = "stream_common",
     .groups = 1,
     .sides = 2,
     .streaming = true,
     .early_trigger = false,
     .common = true,
     .tag = "v35, v36"},
    {.name = "stream",
     .groups = 1,
     .sides = 2,
     .streaming = true,
     .early_trigger = false,
     .common = false,
     .tag = "v11, v12, v18"},
    // Past one wave: the read-only path, small blocks (wave_block_threads) and block prefetch.
    {.name = "wave",
     .groups = 1,
     .sides = 2,
     .streaming = false,
     .early_trigger = false,
     .common = false,
     .tag = "v26, v43"},
};
inline constexpr int kNumWriteKernels = static_cast<int>(std::size(kWriteKernels));
inline constexpr int kStreamCommonRow = 3;  // the row common_path_holds is asked about
static_assert(kWriteKernels[kStreamCommonRow].common && kWriteKernels[kStreamCommonRow].sides == 2);

// The write sizes (in items) where the choice changes, from the kernels' occupancy on the
// writer's device (preload_write_kernels).
struct WriteSizeBars {
  uint64_t pair_min_items = 0;    // at least this many: two groups a thread
  uint64_t split_max_items = 0;   // at most this many: one side a thread
  uint64_t stream_max_items = 0;  // at most this many (and one group a thread): streaming loads
  uint64_t early_max_items = 0;   // at most this many (and one side a thread): early trigger
};

// What the choice looks at besides the size.
struct WriteTraits {
  uint64_t items;          // T * H * S
  bool pairs_possible;     // 16-bit input and an even group count (f32 has no two-group kernel)
  bool scales_alike;       // both scales on the host or both on the device: a one-side thread
                           // that finds a bad device scale must know of its partner's too
  bool common_case_holds;  // common_path_holds of the stream mapping (kernel_desc.h)
};

// The row of kWriteKernels for a write.
constexpr int choose_write_kernel(const WriteTraits& w, const WriteSizeBars& bars) {
  if (w.pairs_possible && w.items >= bars.pair_min_items) return 0;  // two_groups
  if (w.items <= bars.split_max_items && w.scales_alike) {
    return w.items <= bars.early_max_items ? 1 : 2;  // split*
  }
  if (w.items <= bars.stream_max_items) return w.common_case_holds ? 3 : 4;  // stream*
  return 5;                                                                  // wave
}

}  // namespace kvq::cuda
